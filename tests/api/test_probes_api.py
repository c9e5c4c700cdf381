"""The probe endpoints on the tiny repository, in process (real onnxruntime sessions, the real spaCy
parser in its worker process): API keys, bad input naming the field, the three kinds as jobs with
progress and results, cancellation, the job limit, gauges on ``/metrics`` and the history file read
back by a new gateway."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready

KEY = "probe-test-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}


def settings(repo: Path, history: Path, **more: Any) -> Settings:
    return Settings(repo=repo, intra_op_threads=1, api_keys=KEY, state_url=f"sqlite:///{history}", **more)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gateways' shared state: an SQLite file, read back by a new gateway."""
    return tmp_path_factory.mktemp("probes") / "state.db"


@pytest.fixture(scope="module")
def client(tiny_repo: Path, history: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tiny_repo, history, max_probe_jobs=1))) as c:
        wait_ready(c)
        yield c


def finish(client: TestClient, job_id: str, timeout_s: float = 240.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/probes/{job_id}", headers=AUTH).json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"probe {job_id} still {body['status']} after {timeout_s} s: {body['progress']}")


def start(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/probes", json=body, headers=AUTH)
    assert response.status_code == 202, response.text
    assert response.headers["Location"] == f"/v1/probes/{response.json()['id']}"
    return response.json()


def test_probe_endpoints_need_a_key_and_captions_stay_open(client: TestClient) -> None:
    missing = client.get("/v1/probes")
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    wrong = client.post(
        "/v1/probes", json={"kind": "systematicity"}, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "forbidden"
    assert KEY not in wrong.text
    assert client.get("/v1/probes", headers=AUTH).status_code == 200
    assert client.get("/v1/models").status_code == 200  # no key needed outside the probes


def test_captions_need_a_key_only_when_configured(tiny_repo: Path, history: Path) -> None:
    png = (tiny_repo / load_manifest(tiny_repo).probe_set("systematicity").path / "images").glob("*.png")
    files = {"image": ("x.png", next(iter(png)).read_bytes(), "image/png")}
    with TestClient(create_app(settings(tiny_repo, history, captions_require_key=True))) as closed:
        wait_ready(closed)
        assert closed.post("/v1/captions", files=files).status_code == 401
        assert (
            closed.post("/v1/captions", files=files, headers={"Authorization": "Bearer x" * 3}).status_code
            == 403
        )
        assert closed.post("/v1/captions", files=files, headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"kind": "grammar"}, 422, "kind"),
        ({"kind": "systematicity", "model": "nope"}, 404, "model"),
        ({"kind": "systematicity", "rerank": "nope"}, 404, "rerank"),
        ({"kind": "systematicity", "beam_size": 0}, 422, "beam_size"),
        ({"kind": "systematicity", "probe_set": "nope"}, 404, "probe_set"),
        ({"kind": "systematicity", "probe_set": "productivity"}, 422, "probe_set"),
        ({"kind": "productivity", "pairs": ["black cat"]}, 422, "pairs"),
        ({"kind": "systematicity", "pairs": ["green sky"]}, 422, "pairs.0"),
        ({"kind": "systematicity", "images": 0}, 422, "images"),
        ({"kind": "systematicity", "colour": "red"}, 422, "colour"),
    ],
)
def test_bad_probe_requests_name_the_field(
    client: TestClient, body: dict[str, Any], status: int, field: str
) -> None:
    response = client.post("/v1/probes", json=body, headers=AUTH)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert field in {d["field"] for d in error.get("details", [])} or field in error["message"], error


def test_probe_sets_are_listed(client: TestClient, tiny_repo: Path) -> None:
    sets = {s["name"]: s for s in client.get("/v1/probe-sets", headers=AUTH).json()["probe_sets"]}
    assert {s.name for s in load_manifest(tiny_repo).probe_sets} == set(sets)
    assert {s["kind"] for s in sets.values()} == {"systematicity", "productivity", "substitutivity"}
    assert len(sets["systematicity"]["pairs"]) == 24 and sets["systematicity"]["scene_graphs"]


def test_systematicity_probe_reports_every_pair_held_out_or_seen(client: TestClient, tiny_repo: Path) -> None:
    job = start(client, kind="systematicity", model="butd", beam_size=3, n_best=3, images=2)
    assert job["status"] in ("queued", "running") and job["params"]["model"] == "butd"
    done = finish(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["done"] == done["progress"]["total"] > 0 and done["partial"] is None
    result = done["result"]
    held = {
        f"{p.modifier} {p.noun}" for p in load_manifest(tiny_repo).captioner("butd").training.held_out_pairs
    }
    assert len(result["pairs"]) == 24 and held
    assert {r["pair"] for r in result["pairs"] if r["held_out"]} == held
    for row in result["pairs"]:
        assert 1 <= row["images"] <= 2 and 1 <= row["no_comb_images"] <= 2  # at most `images` per pair
        assert all(v is None or 0.0 <= v <= 1.0 for v in row["recall"].values())
        assert list(row["recall"]) == ["1", "2", "3", "4", "5"]
    assert result["held_out"]["pairs"] == len(held) and result["seen"]["pairs"] == 24 - len(held)
    listed = client.get("/v1/probes", headers=AUTH).json()["jobs"]
    assert listed[0]["id"] == job["id"] and listed[0]["result"] is None
    metrics = client.get("/metrics").text
    assert 'compcap_probe_recall_at_k{category="' in metrics and 'model="butd"' in metrics
    assert 'compcap_probe_last_success_timestamp_seconds{kind="systematicity",model="butd"}' in metrics
    assert "compcap_probe_accepted_recall_at_k_mean{" not in metrics  # no baseline until one is accepted
    accepted = client.post(f"/v1/probes/{job['id']}/accept", headers=AUTH)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["accepted_at"] >= done["finished_at"]
    baseline = [
        line
        for line in client.get("/metrics").text.splitlines()
        if line.startswith("compcap_probe_accepted_recall_at_k_mean{") and 'held_out="true"' in line
    ]
    assert len(baseline) == 5 and all('model="butd"' in line for line in baseline)


def test_productivity_and_substitutivity_probes(client: TestClient) -> None:
    prod = finish(client, start(client, kind="productivity", model="butd", beam_size=2, images=3)["id"])
    assert prod["status"] == "succeeded", prod["error"]
    by = prod["result"]["by"]
    assert set(by) == {"density", "length"} and set(by["length"]) == {"short", "medium", "long"}
    for bucket in by["density"].values():
        if bucket["images"]:
            assert bucket["length"] > 0 and 0.0 <= bucket["coverage"] <= 1.0 and bucket["cider_d"] >= 0.0
    sub = finish(client, start(client, kind="substitutivity", model="butd", beam_size=2, images=3)["id"])
    assert sub["status"] == "succeeded", sub["error"]
    r = sub["result"]
    assert r["images"] > 0 and r["substituted"] <= r["images"]
    if r["substituted"]:
        assert set(r["rows"]) >= {"O vs GT", "S vs GT", "O vs S"} and 0.0 <= r["exact_replacement"] <= 1.0
        for example in r["examples"]:  # S never keeps a substituted word
            assert not set(example["S"].split()) & set(r["words"])


def test_a_cancelled_job_says_so_and_the_limit_answers_429(client: TestClient) -> None:
    job = start(client, kind="systematicity", model="butr", beam_size=8, n_best=5)
    full = client.post("/v1/probes", json={"kind": "productivity"}, headers=AUTH)
    assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
    assert full.json()["error"]["code"] == "too_many_probes"
    cancelled = client.delete(f"/v1/probes/{job['id']}", headers=AUTH).json()
    assert cancelled["status"] == "cancelled" and "cancelled" in cancelled["error"]
    assert client.get(f"/v1/probes/{job['id']}", headers=AUTH).json()["status"] == "cancelled"
    refused = client.post(f"/v1/probes/{job['id']}/accept", headers=AUTH)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "job_not_succeeded"
    assert client.get("/v1/probes/nope", headers=AUTH).status_code == 404
    # the gateway keeps serving captions and takes a new probe
    assert client.get("/readyz").status_code == 200
    again = finish(
        client,
        start(client, kind="systematicity", model="butd", beam_size=1, images=1, pairs=["black cat"])["id"],
    )
    assert again["status"] == "succeeded" and [r["pair"] for r in again["result"]["pairs"]] == ["black cat"]


def test_a_new_gateway_reads_the_history_back(client: TestClient, tiny_repo: Path, history: Path) -> None:
    ids = {
        j["id"] for j in client.get("/v1/probes", headers=AUTH).json()["jobs"] if j["status"] == "succeeded"
    }
    assert ids and history.is_file()
    with TestClient(create_app(settings(tiny_repo, history))) as fresh:
        restored = {j["id"]: j for j in fresh.get("/v1/probes", headers=AUTH).json()["jobs"]}
        metrics = fresh.get("/metrics").text
    assert ids <= {i for i, j in restored.items() if j["status"] == "succeeded"}  # every replica's jobs
    assert all(j["status"] != "running" for j in restored.values())
    assert 'compcap_probe_last_success_timestamp_seconds{kind="systematicity",model="butd"}' in metrics
    assert 'compcap_probe_recall_at_k{category="' in metrics
    # the baseline survives a restart, though a later run of the same probe is the job restored
    assert "compcap_probe_accepted_recall_at_k_mean{" in metrics
