"""Live probes against a real ``compcap serve`` on the tiny repository:

- same path, same numbers: the live systematicity probe gives, pair for pair, the Recall@1..5 that
  ``compcap-lab evaluate`` computes on the probe set's group splits with the same parameters — plain beam
  search and re-ranked by the captioner's own ranker;
- a scheduled probe's gauges appear on ``/metrics`` within one interval, and a restarted gateway (no
  schedule) serves them again from its history file."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from compcap_lab.studies.evaluate import evaluate
from service.manifest import load_manifest
from tests.integration.conftest import free_port, serving

RERANK_BEAM = 12  # the tiny repository's stand-in for the seeds' B = 100


def serve(repo: Path, tmp: Path, name: str, **env: str) -> Any:
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    environ = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", **env}
    return serving(cmd, environ, port, tmp / f"{name}.log")


def run_probe(url: str, body: dict[str, Any], timeout_s: float = 300.0) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30.0, trust_env=False) as client:
        job = client.post("/v1/probes", json=body)
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = client.get(f"/v1/probes/{job.json()['id']}").json()
            if state["status"] not in ("queued", "running"):
                assert state["status"] == "succeeded", state["error"]
                return dict(state["result"])
            time.sleep(0.25)
    raise AssertionError("the probe did not finish")


def test_live_systematicity_probe_equals_compcap_evaluate(tiny_repo: Path, tmp_path: Path) -> None:
    manifest = load_manifest(tiny_repo)
    probe_dir = tiny_repo / manifest.probe_set("systematicity").path
    with serve(tiny_repo, tmp_path, "serve", COMPCAP_STATE_URL="") as url:
        live = {
            None: run_probe(
                url, {"kind": "systematicity", "model": "butr", "rerank": False, "beam_size": 5, "n_best": 5}
            ),
            "butr": run_probe(
                url,
                {
                    "kind": "systematicity",
                    "model": "butr",
                    "rerank": "butr",
                    "beam_size": RERANK_BEAM,
                    "n_best": 5,
                },
            ),
        }
    compared = 0
    for group in (1, 2, 3, 4):
        offline = evaluate(
            tiny_repo,
            probe_dir,
            None,
            "systematicity",
            group,
            None,
            beam_size=5,
            captioners=["butr"],
            meteor=False,
            rerank_beam_size=RERANK_BEAM,
            fallback_ranker=False,
        )
        for row in offline["results"]:
            pairs = {r["pair"]: r for r in live[row["ranker"]]["pairs"] if r["group"] == group}
            assert set(pairs) == set(row["per_pair"])
            for label, figures in row["per_pair"].items():
                assert pairs[label]["images"] == figures["images"]
                for k in ("1", "2", "3", "4", "5"):  # evaluate rounds recall to 6 digits; hits are exact
                    assert pairs[label]["hits"][k] == figures["hits"][k], (row["ranker"], label, k)
                    live_recall = pairs[label]["recall"][k]
                    assert (None if live_recall is None else round(live_recall, 6)) == figures["recall"][k]
                    compared += 1
    assert compared == 2 * 24 * 5


def test_scheduled_probe_gauges_appear_and_survive_a_restart(tiny_repo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    schedule = "every=30s;kinds=systematicity,substitutivity;models=butd;images=1;beam=2"
    gauge = re.compile(
        r'^compcap_probe_last_success_timestamp_seconds\{kind="substitutivity",model="butd"\} (\S+)$', re.M
    )
    with serve(
        tiny_repo,
        tmp_path,
        "scheduled",
        COMPCAP_PROBE_SCHEDULE=schedule,
        COMPCAP_STATE_URL=f"sqlite:///{state}",
    ) as url:
        began = time.time()
        # the first scheduled probes start with the server, not one interval later; how long they take
        # depends on the machine, so their results are waited for (bounded only against a hang)
        deadline = time.monotonic() + 600.0
        seen = None
        while time.monotonic() < deadline and seen is None:
            seen = gauge.search(httpx.get(f"{url}/metrics", trust_env=False).text)
            time.sleep(0.5)
        assert seen is not None, "no scheduled probe result"
        assert float(seen.group(1)) >= began - 1
        jobs = httpx.get(f"{url}/v1/probes", trust_env=False).json()["jobs"]
        scheduled = [j for j in jobs if j["params"]["scheduled"]]
        assert any(j["status"] == "succeeded" for j in scheduled)
        # started with the engine, not after a first 30 s interval (which would put it near began + 30)
        assert min(j["created_at"] for j in scheduled) < began + 10.0
    assert state.is_file()
    with serve(tiny_repo, tmp_path, "restarted", COMPCAP_STATE_URL=f"sqlite:///{state}") as url:
        again = gauge.search(httpx.get(f"{url}/metrics", trust_env=False).text)
        assert again is not None and again.group(1) == seen.group(1)
        text = httpx.get(f"{url}/metrics", trust_env=False).text
        assert 'compcap_probe_recall_at_k{category="' in text
