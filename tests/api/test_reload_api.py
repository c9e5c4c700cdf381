"""Changes on disk reach a running gateway without a restart: probe sets registered
and a captioner added while it serves are picked up by ``POST /v1/admin/reload`` and by the watch
(``COMPCAP_REPO_WATCH_S``); a repository that cannot be loaded leaves the old one serving; requests in
flight finish on the engine they started with; registering probe sets leaves manifest.json as it was."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from service.api.deps import Runtime
from service.engine.engine import CaptionEngine
from service.gateway.app import create_app
from service.manifest import MANIFEST_NAME, load_manifest, repo_version
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.reload_repo import add_twin_captioner, register_source_sets, repo_without_probe_sets

KEY = "reload-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def repo(tiny_repo: Path, tmp_path: Path) -> Path:
    return repo_without_probe_sets(tiny_repo, tmp_path / "repo")


@pytest.fixture
def client(repo: Path) -> Iterator[TestClient]:
    app = create_app(Settings(repo=repo, intra_op_threads=1, repo_watch_s=0, api_keys=KEY))
    with TestClient(app) as c:
        wait_ready(c)
        yield c


def listed_sets(client: TestClient) -> set[str]:
    response = client.get("/v1/probe-sets", headers=AUTH)
    assert response.status_code == 200, response.text
    return {s["name"] for s in response.json()["probe_sets"]}


def image(repo: Path) -> np.ndarray:
    """One fixed image of ``repo``'s size (its manifest as the test found it)."""
    m = load_manifest(repo).image
    return np.random.default_rng(0).integers(0, 256, (m.height, m.width, 3), dtype=np.uint8)


def caption(client: TestClient, pixels: np.ndarray, model: str) -> dict[str, object]:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    body = {"images": [base64.b64encode(buf.getvalue()).decode()], "model": model, "beam_size": 2}
    response = client.post("/v1/captions", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_probe_sets_registered_while_serving_are_served_after_a_reload(
    client: TestClient, repo: Path, tiny_repo: Path
) -> None:
    assert listed_sets(client) == set()
    before = (repo / MANIFEST_NAME).read_bytes()
    register_source_sets(tiny_repo, repo, ["systematicity"])
    assert (repo / MANIFEST_NAME).read_bytes() == before  # the probe index holds them, not the manifest
    assert client.post("/v1/admin/reload").status_code == 401  # behind the API keys
    response = client.post("/v1/admin/reload", headers=AUTH)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["changed"] and not answer["models_reloaded"] and answer["probe_sets"] == ["systematicity"]
    assert answer["version"] == repo_version(repo) != answer["previous_version"]
    assert answer["generation"] is None  # an in-memory state store: this gateway only
    assert listed_sets(client) == {"systematicity"}
    again = client.post("/v1/admin/reload", headers=AUTH, json={"force": False}).json()
    assert not again["changed"] and again["version"] == answer["version"]


def test_a_captioner_added_while_serving_is_served_after_a_reload(client: TestClient, repo: Path) -> None:
    default, pixels = load_manifest(repo).default_captioner, image(repo)
    first = caption(client, pixels, default)
    models = {m["name"] for m in client.get("/v1/models").json()["captioners"]}
    assert "twin" not in models
    add_twin_captioner(repo, default, "twin")
    response = client.post("/v1/admin/reload", headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.json()["models_reloaded"]
    assert "twin" in {m["name"] for m in client.get("/v1/models").json()["captioners"]}
    # the twin is the default captioner's models under other names: the same captions
    twin, again = caption(client, pixels, "twin"), caption(client, pixels, default)
    assert twin["results"] == again["results"] == first["results"]


def test_a_repository_that_cannot_be_loaded_leaves_the_old_one_serving(
    client: TestClient, repo: Path
) -> None:
    default, pixels = load_manifest(repo).default_captioner, image(repo)
    good = (repo / MANIFEST_NAME).read_text()
    (repo / MANIFEST_NAME).write_text(json.dumps({**json.loads(good), "default_captioner": "nobody"}))
    response = client.post("/v1/admin/reload", headers=AUTH)
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert error["code"] == "reload_failed" and "nobody" in error["message"]
    caption(client, pixels, default)  # still serving the repository loaded before
    (repo / MANIFEST_NAME).write_text(good)
    assert client.post("/v1/admin/reload", headers=AUTH).status_code == 200


def test_the_watch_serves_new_probe_sets_unasked(repo: Path, tiny_repo: Path) -> None:
    app = create_app(Settings(repo=repo, intra_op_threads=1, repo_watch_s=0.05))
    with TestClient(app) as c:
        wait_ready(c)
        assert listed_sets(c) == set()
        register_source_sets(tiny_repo, repo, ["productivity"])
        deadline = time.monotonic() + 30.0  # a hang guard; the watch looks every 0.05 s
        while listed_sets(c) != {"productivity"}:
            assert time.monotonic() < deadline, "the watch did not pick the probe set up"
            time.sleep(0.05)
        metrics = c.get("/metrics").text
        assert 'compcap_repo_reloads_total{outcome="manifest"} 1.0' in metrics


def test_in_flight_captions_finish_on_the_engine_they_started_with(repo: Path) -> None:
    """A forced reload while captions decode: they are answered by the old engine, new ones go to the
    new engine, and the old one's schedulers stop once it is idle (a call on it still works)."""

    async def scenario() -> None:
        runtime = Runtime(Settings(repo=repo, intra_op_threads=1, repo_watch_s=0))
        await runtime.load()
        old = runtime.engine
        assert isinstance(old, CaptionEngine)
        params = old.resolve(beam_size=3)
        images = np.stack([image(repo)] * 2)
        expected = await old.caption(images, params)
        running = [asyncio.create_task(old.caption(images, params)) for _ in range(3)]
        await asyncio.sleep(0)  # submitted
        assert old.in_flight == 3
        outcome = await runtime.reloader.reload(force=True)
        assert outcome.models and runtime.engine is not old
        for done in await asyncio.gather(*running):
            assert [c[0].text for c in done.results] == [c[0].text for c in expected.results]
        for _ in range(1000):  # stopped once idle, on the loop's next turns
            if old.in_flight == 0 and not old._schedulers:
                break
            await asyncio.sleep(0.01)
        assert old.in_flight == 0 and not old._schedulers
        late = await old.caption(images, params)  # a probe job started on it goes on working
        assert [c[0].text for c in late.results] == [c[0].text for c in expected.results]
        new = await runtime.engine.caption(images, runtime.engine.resolve(beam_size=3))
        assert [c[0].text for c in new.results] == [c[0].text for c in expected.results]
        await runtime.close()

    asyncio.run(scenario())
