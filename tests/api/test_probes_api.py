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

from service.cli.commands import probe_summary
from service.evaluation.intervals import RESAMPLES, SEED, bootstrap_interval
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


def held_hits(result: dict[str, Any], part: str, k: int) -> list[list[float]]:
    """The per-image hits the job stored, as the bootstrap reads them: the part's pairs in row order,
    each pair's images in ascending id, 1.0 where the first hit is at rank k or better."""
    rows = [r for r in result["pairs"] if part == "all" or bool(r["held_out"]) == (part == "held_out")]
    return [
        [
            1.0 if (rank := r["first_hit"][i]) is not None and rank <= k else 0.0
            for i in sorted(r["first_hit"], key=int)
        ]
        for r in rows
    ]


def test_intervals_are_recomputed_from_the_stored_hits(client: TestClient) -> None:
    """A real systematicity job keeps each pair's per-image first hits; one interval recomputed from
    them with the job's seed (``bootstrap_interval``, not the job's code path) is the answer's exactly
    (the same data in the same order through the same PCG64 draws, which numpy makes
    platform-independent); another seed's agrees within the bootstrap's Monte-Carlo error: the
    standard error to 6% (its relative MC error is 1/sqrt(2 R) = 1.6% for R = 2000 resamples), the
    bounds to 0.2 se (a 2.5% quantile's MC error is about 0.06 se) plus one step of the lattice a mean
    of group means of so few images lives on. The gauges carry the interval's bounds."""
    done = finish(
        client, start(client, kind="systematicity", model="butd", beam_size=3, n_best=3, images=3)["id"]
    )
    assert done["status"] == "succeeded", done["error"]
    result = done["result"]
    how = result["intervals"]
    assert how["seed"] == SEED and how["resamples"] == RESAMPLES and how["level"] == 0.95
    for row in result["pairs"]:
        assert (
            len(row["first_hit"]) == row["images"] and len(row["no_comb_first_hit"]) == row["no_comb_images"]
        )
        for k in ("1", "5"):
            recall, found = row["recall"][k], row["recall_interval"][k]
            assert (recall is None) == (found is None)
            if found is not None:
                assert found["low"] <= recall <= found["high"] and found["groups"] == 1
    # the part and K with the widest interval (a degenerate [0, 0] would test nothing)
    part, k = max(
        ((p, k) for p in ("held_out", "seen") for k in result["ks"]),
        key=lambda pk: (result[pk[0]]["recall_interval"][str(pk[1])] or {}).get("se", -1.0),
    )
    answered = result[part]["recall_interval"][str(k)]
    groups = held_hits(result, part, k)
    recomputed = bootstrap_interval(groups, seed=how["seed"])
    assert recomputed is not None
    assert {key: recomputed.as_dict()[key] for key in answered} == answered
    assert answered["estimate"] == pytest.approx(result[part]["recall"][str(k)], abs=1e-6)
    assert answered["low"] <= answered["estimate"] <= answered["high"]
    other = bootstrap_interval(groups, seed=how["seed"] + 1)
    assert other is not None  # on the tiny repository's captioners every hit is 0 (se 0): see the unit
    # test ``test_probe_intervals`` for the same check on hits that vary
    assert abs(other.se - answered["se"]) <= 0.06 * answered["se"]
    step = 1 / (len(groups) * min(len(g) for g in groups if g))  # the lattice of a mean of group means
    for bound in ("low", "high"):
        assert abs(getattr(other, bound) - answered[bound]) <= 0.2 * answered["se"] + step + 1e-9
    table = probe_summary(done)  # what ``compcap probe`` prints
    assert f"R@{result['ks'][-1]} CI" in table and "mean recall (Recall@K) [0.95 interval]" in table
    low, high = answered["low"], answered["high"]
    assert f"{result[part]['recall'][str(k)]:.3f} [{low:.3f}, {high:.3f}]" in table
    metrics = client.get("/metrics").text
    for name in (
        "compcap_probe_recall_at_k_mean",
        "compcap_probe_recall_at_k",
        "compcap_probe_false_composition",
    ):
        for bound in ("low", "high"):
            assert f"{name}_{bound}{{" in metrics and 'model="butd"' in metrics
    lines = [line for line in metrics.splitlines() if line.startswith("compcap_probe_recall_at_k_mean_low{")]
    held = "true" if part == "held_out" else "false"
    shown = next(
        line
        for line in lines
        if f'held_out="{held}"' in line and f'k="{k}"' in line and 'model="butd"' in line
    )
    assert float(shown.rsplit(" ", 1)[1]) == pytest.approx(answered["low"])


def test_two_jobs_are_compared_on_their_shared_images(client: TestClient) -> None:
    """A job against itself: every difference 0 with p-value 1; refusals name why (404 unknown job,
    409 another kind, a job that did not succeed, no shared pair)."""
    one = finish(
        client, start(client, kind="systematicity", model="butd", beam_size=2, n_best=2, images=2)["id"]
    )
    assert one["status"] == "succeeded", one["error"]
    same = client.get(f"/v1/probes/{one['id']}/compare/{one['id']}", headers=AUTH)
    assert same.status_code == 200, same.text
    body = same.json()
    assert body["kind"] == "systematicity" and body["a"] == body["b"] == one["id"]
    assert {"held_out.recall_at_5", "seen.recall_at_5", "all.recall_at_1", "false_composition_at_1"} <= set(
        body["figures"]
    )
    for name, test in body["figures"].items():
        if test is not None:
            assert test["p_value"] == 1.0 and test["difference"]["estimate"] == 0.0, name
    assert client.get(f"/v1/probes/{one['id']}/compare/nope", headers=AUTH).status_code == 404
    assert client.get(f"/v1/probes/{one['id']}/compare/{one['id']}").status_code == 401  # behind the keys
    prod = finish(client, start(client, kind="productivity", model="butd", beam_size=1, images=1)["id"])
    other_kind = client.get(f"/v1/probes/{one['id']}/compare/{prod['id']}", headers=AUTH)
    assert other_kind.status_code == 409 and other_kind.json()["error"]["code"] == "not_comparable"
    assert "systematicity" in other_kind.json()["error"]["message"] and "productivity" in other_kind.text
    itself = client.get(f"/v1/probes/{prod['id']}/compare/{prod['id']}", headers=AUTH).json()
    assert all(t is None or t["p_value"] == 1.0 for t in itself["figures"].values()) and itself["figures"]
    pairs = {r["pair"]: r["group"] for r in one["result"]["pairs"]}
    a_pair = next(iter(pairs))
    b_pair = next(p for p, g in pairs.items() if g != pairs[a_pair])
    a = finish(
        client, start(client, kind="systematicity", model="butd", beam_size=1, images=1, pairs=[a_pair])["id"]
    )
    b = finish(
        client, start(client, kind="systematicity", model="butd", beam_size=1, images=1, pairs=[b_pair])["id"]
    )
    apart = client.get(f"/v1/probes/{a['id']}/compare/{b['id']}", headers=AUTH)
    assert apart.status_code == 409 and "share no pair" in apart.json()["error"]["message"]
    cancelled = start(client, kind="systematicity", model="butr", beam_size=8, n_best=5)
    client.delete(f"/v1/probes/{cancelled['id']}", headers=AUTH)
    refused = client.get(f"/v1/probes/{one['id']}/compare/{cancelled['id']}", headers=AUTH)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "job_not_succeeded"
    assert cancelled["id"] in refused.json()["error"]["message"]
