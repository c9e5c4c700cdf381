"""A probe kind is one record: this test registers a small kind of its own (mean caption length on
the productivity probe set's images) and finds it, with nothing else changed, in ``GET
/v1/probe-kinds`` and the OpenAPI document, run as a job through ``POST /v1/probes`` with its summary
and its gauge, run by the probe schedule, listed by the client and printed as its table by
``compcap probe`` against a real HTTP server (uvicorn on an ephemeral port, in this process so that it
sees the registration)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Gauge

from compcap_client import CompCapClient
from service.cli import main as cli
from service.gateway.app import create_app
from service.probes.jobs.schedule import parse_schedule
from service.probes.kinds import kind_names, register, unregister
from service.probes.kinds.record import KindRun, ProbeKind, cap, decode
from service.probes.kinds.tables import cell, table
from service.settings import Settings
from tests.api.conftest import wait_ready

NAME = "mean_length"


async def run(job: KindRun) -> dict[str, Any]:
    ids = cap(job.probe_set.image_ids, job.spec.images or 4)
    job.progress.total = len(ids)
    decoded = await decode(job.engine, job.probe_set, ids, job.spec.params, job.progress)
    top1 = {i: c[0] for i, c in decoded.items()}
    words = [len(c.split()) for c in top1.values()]
    return {"images": len(words), "mean_words": sum(words) / len(words), "captions": top1}


class Gauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.words = Gauge(
            "compcap_probe_test_mean_words", "test kind", ["model", "ranker"], registry=registry
        )

    def record(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        self.words.labels(model, ranker).set(result["mean_words"])

    def accept(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        pass


KIND = ProbeKind(
    name=NAME,
    description="test only: mean words of the top-1 caption",
    run=run,
    sets="productivity",
    gauges=Gauges,
    table=lambda r: [
        "mean words per top-1 caption",
        table(["images", "words"], [[cell(r["images"]), cell(r["mean_words"], digits=2)]]),
    ],
    summary=lambda r: f"mean words {r['mean_words']:.2f} over {r['images']} images",
)


@pytest.fixture(scope="module")
def registered() -> Iterator[ProbeKind]:
    register(KIND)
    try:
        yield KIND
    finally:
        unregister(NAME)
    assert NAME not in kind_names()


@pytest.fixture(scope="module")
def client(tiny_repo: Path, registered: ProbeKind) -> Iterator[TestClient]:
    schedule = f"every=3600s;kinds={NAME};images=2"
    with TestClient(create_app(Settings(repo=tiny_repo, intra_op_threads=1, probe_schedule=schedule))) as c:
        wait_ready(c)
        yield c


def finish(client: TestClient, job_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/probes/{job_id}").json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        time.sleep(0.1)
    raise AssertionError(f"probe {job_id} did not finish in {timeout_s} s")


def test_the_kind_is_listed_and_declared(client: TestClient) -> None:
    kinds = {k["name"]: k for k in client.get("/v1/probe-kinds").json()["kinds"]}
    assert list(kinds)[:3] == ["systematicity", "productivity", "substitutivity"]
    mine = kinds[NAME]
    assert {k: mine[k] for k in ("name", "description", "probe_sets", "takes_pairs")} == {
        "name": NAME,
        "description": KIND.description,
        "probe_sets": "productivity",
        "takes_pairs": False,
    }
    # what the record says and nothing else: the format it reads, its gauges, no chart of its own
    assert mine["set_format"]["name"] == "productivity" and "buckets" in mine["set_format"]["readers"]
    assert mine["gauges"] == [{"name": "compcap_probe_test_mean_words", "help": "test kind"}]
    assert mine["fields"] == {} and mine["figures"] == [] and mine["view"]["chart"] is None
    assert kinds["systematicity"]["takes_pairs"] is True
    assert kinds["systematicity"]["view"]["chart"]["figure"] == "Recall@"
    schema = client.get("/openapi.json").json()["components"]["schemas"]["ProbeRequest"]
    assert schema["properties"]["kind"]["enum"] == list(kinds)


def test_the_kind_runs_as_a_job_with_its_summary_and_gauge(client: TestClient) -> None:
    started = client.post("/v1/probes", json={"kind": NAME, "images": 3, "beam_size": 2})
    assert started.status_code == 202, started.text
    job = finish(client, started.json()["id"])
    assert job["status"] == "succeeded", job
    result = job["result"]
    assert result["images"] == 3 and len(result["captions"]) == 3
    assert result["mean_words"] == pytest.approx(sum(len(c.split()) for c in result["captions"].values()) / 3)
    assert job["summary"] == f"mean words {result['mean_words']:.2f} over 3 images"
    listed = {j["id"]: j for j in client.get("/v1/probes").json()["jobs"]}
    assert listed[job["id"]]["summary"] == job["summary"]  # the web page reads it from the listing
    metrics = client.get("/metrics").text
    model, ranker = job["params"]["model"], job["params"]["rerank"] or "none"
    assert f'compcap_probe_test_mean_words{{model="{model}",ranker="{ranker}"}}' in metrics
    # request validation is the registry's: pairs are refused for a kind that takes none
    refused = client.post("/v1/probes", json={"kind": NAME, "pairs": ["black cat"]})
    assert refused.status_code == 422 and refused.json()["error"]["details"][0]["field"] == "pairs"
    unknown = client.post("/v1/probes", json={"kind": "grammar"})
    assert unknown.status_code == 422 and NAME in unknown.json()["error"]["message"]


def test_the_schedule_runs_the_kind(client: TestClient) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        scheduled = [j for j in client.get("/v1/probes").json()["jobs"] if j["params"]["scheduled"]]
        if scheduled and scheduled[-1]["status"] in ("succeeded", "failed"):
            break
        time.sleep(0.2)
    assert scheduled and scheduled[-1]["kind"] == NAME and scheduled[-1]["status"] == "succeeded"
    assert scheduled[-1]["params"]["images"] == 2
    assert parse_schedule(f"every=1m;kinds={NAME}").kinds == (NAME,)
    assert parse_schedule("every=1m").kinds == kind_names()


def test_the_cli_prints_the_kind_table(
    tiny_repo: Path, registered: ProbeKind, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(Settings(repo=tiny_repo, intra_op_threads=1))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while not server.started or httpx.get(f"{url}/readyz").status_code != 200:
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not get ready"
            time.sleep(0.1)
        with CompCapClient(url) as client:
            assert NAME in [k["name"] for k in client.probe_kinds()]
        code = cli(
            ["probe", "--url", url, "--kind", NAME, "--images", "2", "--beam-size", "2", "--poll", "0.1"]
        )
        out = capsys.readouterr().out
        assert code == 0, out
        assert f": {NAME} of " in out and "succeeded" in out
        lines = out.splitlines()
        header = lines.index("mean words per top-1 caption")
        assert lines[header + 1].split() == ["images", "words"] and lines[header + 2].split()[0] == "2"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive()
