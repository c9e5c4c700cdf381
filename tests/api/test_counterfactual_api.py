"""The counterfactual probe kind live on the tiny repository: ``compcap probesets --kind counterfactual``
on a copy of it writes the minimal pairs (the build does not), and ``POST /v1/probes`` runs the kind
(real onnxruntime sessions, the real spaCy parser): every held-out and seen top-1 caption is a hit or
one of the miss classes, every figure has its interval, the gauges and listings show the kind."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from export.probesets.repo import add_probe_sets
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.probes.scoring.counterfactual import MISS_CLASSES, OUTCOMES
from service.probesets import load_probe_set
from service.settings import Settings
from tests.api.conftest import wait_ready

KEY = "counterfactual-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny repository with its counterfactual probe set added."""
    copy = tmp_path_factory.mktemp("counterfactual") / "model_repo"
    shutil.copytree(tiny_repo, copy, symlinks=True)
    summary = add_probe_sets(copy, kinds=["counterfactual"])
    assert [s["name"] for s in summary["probe_sets"]] == ["counterfactual"]
    return copy


@pytest.fixture(scope="module")
def client(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    state = tmp_path_factory.mktemp("state") / "state.db"
    settings = Settings(repo=repo, intra_op_threads=1, api_keys=KEY, state_url=f"sqlite:///{state}")
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def finish(client: TestClient, job_id: str, timeout_s: float = 240.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/probes/{job_id}", headers=AUTH).json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"probe {job_id} still {body['status']} after {timeout_s} s")


def test_the_set_holds_minimal_pairs_of_the_default_captioners_held_out_pairs(repo: Path) -> None:
    manifest = load_manifest(repo)
    assert "counterfactual" not in {e.name for e in manifest.probe_sets}  # the manifest is left alone
    held = manifest.captioner(manifest.default_captioner).training.held_out_pairs
    probe = load_probe_set(repo / "probes" / "counterfactual")
    assert [p.pair.label for p in probe.minimal_pairs()] == [f"{p.modifier} {p.noun}" for p in held]
    assert all(len(p.minimal_pairs) == 4 for p in probe.minimal_pairs())  # the tiny preset's size


def test_the_kind_is_listed_and_checks_its_pairs(client: TestClient) -> None:
    kinds = {k["name"]: k for k in client.get("/v1/probe-kinds", headers=AUTH).json()["kinds"]}
    kind = kinds["counterfactual"]
    assert kind["probe_sets"] == "counterfactual" and kind["takes_pairs"]
    sets = {s["name"]: s for s in client.get("/v1/probe-sets", headers=AUTH).json()["probe_sets"]}
    assert [p["minimal_pairs"] for p in sets["counterfactual"]["pairs"]] == [4] * 6
    bad = client.post("/v1/probes", json={"kind": "counterfactual", "pairs": ["green sky"]}, headers=AUTH)
    assert bad.status_code == 422 and "pairs.0" in bad.text
    wrong = client.post(
        "/v1/probes", json={"kind": "counterfactual", "probe_set": "systematicity"}, headers=AUTH
    )
    assert wrong.status_code == 422 and wrong.json()["error"]["details"][0]["field"] == "probe_set"


def test_every_miss_is_classified_with_intervals(client: TestClient) -> None:
    body = {"kind": "counterfactual", "model": "butd", "beam_size": 3, "n_best": 3, "images": 3}
    started = client.post("/v1/probes", json=body, headers=AUTH)
    assert started.status_code == 202, started.text
    done = finish(client, started.json()["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["done"] == done["progress"]["total"] == 6 * 3 * 2
    result = done["result"]
    assert result["minimal_pairs"] == 18 and len(result["pairs"]) == 12
    for row in result["pairs"]:
        assert row["images"] == 3 and row["model_held_out"] is True
        assert sum(row["outcomes"][o] for o in OUTCOMES) == pytest.approx(1.0)  # every miss classified
        assert row["recall"]["1"] == row["outcomes"]["hit"]
    for side in ("held_out", "seen"):
        part = result[side]
        assert part["pairs"] == 6
        for k in ("1", "5"):
            interval = part["recall_interval"][k]
            assert interval["low"] <= part["recall"][k] <= interval["high"] and interval["units"] == 18
        assert set(part["outcome_intervals"]) == set(OUTCOMES)
    test = result["difference"]["recall"]["1"]
    assert 0.0 < test["p_value"] <= 1.0
    assert test["difference"]["estimate"] == pytest.approx(
        result["held_out"]["recall"]["1"] - result["seen"]["recall"]["1"]
    )
    assert set(result["difference"]["outcomes"]) == set(OUTCOMES)
    assert "hit@1" in done["summary"] and all(c.replace("_", " ") in done["summary"] for c in MISS_CLASSES)
    metrics = client.get("/metrics").text
    assert 'compcap_probe_counterfactual_hit_rate_low{k="1",model="butd"' in metrics
    assert "compcap_probe_counterfactual_outcome_rate{" in metrics
    assert 'compcap_probe_last_success_timestamp_seconds{kind="counterfactual",model="butd"}' in metrics
    one = client.post("/v1/probes", json={**body, "pairs": ["black cat"], "images": 1}, headers=AUTH)
    again = finish(client, one.json()["id"])
    assert again["status"] == "succeeded" and {r["pair"] for r in again["result"]["pairs"]} == {"black cat"}
