"""The gateway on the null backend (``COMPCAP_BACKEND=null``, ``compcap bench --backend null``): it
serves captions that end (multipart, with and without re-ranking, several captioners), reports device
``none`` on ``GET /v1/models`` and ``/healthz``, and a probe job that reads the decode still runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.backends.null import end_words
from service.gateway.app import create_app
from service.manifest import Manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images

KEY = "null-backend-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def client(tiny_repo: Path) -> Iterator[TestClient]:
    settings = Settings(repo=tiny_repo, backend="null", api_keys=KEY, state_url="")
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def test_models_and_health_say_no_device(client: TestClient, manifest: Manifest) -> None:
    models = client.get("/v1/models").json()
    assert models["device"] == "none" and set(models["devices"].values()) == {"none"}
    assert set(models["devices"]) == {m.name for m in manifest.models}
    assert client.get("/healthz").json() == {"status": "ok", "device": "none"}
    assert 'device="none",model="visual_encoder",provider="null"' in client.get("/metrics").text


@pytest.mark.parametrize(
    "params", [{}, {"beam_size": 1}, {"rerank": "false"}, {"model": "butd", "n_best": 3}]
)
def test_captions_end(client: TestClient, manifest: Manifest, params: dict[str, object]) -> None:
    response = post_images(client, png(1), png(2), **params)
    assert response.status_code == 200, response.text
    cap = manifest.captioner(str(params.get("model", manifest.default_captioner)))
    for result in response.json()["results"]:
        captions = result["captions"]
        assert captions and all(len(c["text"].split()) == end_words(cap) for c in captions)


def test_a_probe_job_runs(client: TestClient) -> None:
    job = client.post("/v1/probes", json={"kind": "systematicity", "beam_size": 2, "images": 1}, headers=AUTH)
    assert job.status_code == 202, job.text
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        body = client.get(f"/v1/probes/{job.json()['id']}", headers=AUTH).json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert body["status"] == "succeeded", body["error"]
    assert body["result"]["pairs"]
