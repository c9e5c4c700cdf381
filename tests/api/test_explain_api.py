"""``POST /v1/explain`` through the real app on the tiny repository: uploads and probe-set images, the
grounding score where a scene graph exists, overlays that decode, clear 4xx errors, the key, and 429
with Retry-After when the explanation slots are full."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from service.gateway.app import create_app
from service.settings import Settings
from tests.api.conftest import wait_ready


@pytest.fixture(scope="module")
def client(tiny_repo: Path) -> Iterator[TestClient]:
    app = create_app(Settings(repo=tiny_repo, intra_op_threads=1, api_keys="explain-key-1"))
    with TestClient(app, headers={"Authorization": "Bearer explain-key-1"}) as c:
        wait_ready(c)
        yield c


def png(seed: int = 0) -> str:
    arr = np.random.default_rng(seed).integers(0, 256, size=(60, 80, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def first_image(client: TestClient, name: str = "productivity") -> int:
    sets = {s["name"]: s for s in client.get("/v1/probe-sets").json()["probe_sets"]}
    assert sets[name]["scene_graphs"]
    from service.manifest import load_manifest
    from service.probes.sets import repo_probe_sets

    repo = client.app.state.runtime.settings.repo  # type: ignore[attr-defined]
    return repo_probe_sets(repo, load_manifest(repo))[name].image_ids[0]


def test_an_upload_is_explained_word_by_word(client: TestClient) -> None:
    r = client.post("/v1/explain", json={"image": png(), "beam_size": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "attention" and body["source"] == "engine" and body["grid"] == [6, 6]
    assert [w["word"] for w in body["words"]] == body["caption"].split()
    word = body["words"][0]
    assert np.array(word["values"]).shape == (6, 6) and 0 <= word["argmax_region"] < 36
    overlay = Image.open(io.BytesIO(base64.b64decode(word["overlay_png"])))
    assert overlay.size == (192, 192)  # 96 px image, enlarged twice
    assert body["scene_graph"] is False and body["grounding_score"] is None
    assert set(body["timings_ms"]) >= {"caption", "maps", "per_word"}


def test_a_probe_image_brings_its_scene_graph_and_the_grounding_score(client: TestClient) -> None:
    ref = {"probe_set": "productivity", "image_id": first_image(client)}
    r = client.post(
        "/v1/explain", json={"image_ref": ref, "caption": "a dog on the grass", "overlays": False}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "client" and body["caption"] == "a dog on the grass"
    scores = body["grounding_score"]
    assert list(scores) == ["0", "1", "3", "5", "inf"]
    assert all(a <= b for a, b in zip(list(scores.values()), list(scores.values())[1:], strict=False))
    dog = body["words"][1]
    assert dog["noun"] == "dog" and "under_argmax" in dog and isinstance(dog["grounded"], bool)
    assert body["words"][0]["grounded"] is None  # "a" is not a noun
    assert dog["overlay_png"] is None


@pytest.mark.parametrize("method", ["saliency", "integrated_gradients"])
def test_gradient_methods(client: TestClient, method: str) -> None:
    r = client.post("/v1/explain", json={"image": png(1), "method": method, "n_steps": 8, "overlays": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == method and body["words"]
    if method == "integrated_gradients":
        ig = body["integrated_gradients"]
        assert ig["n_steps"] == 8 and len(ig["delta"]) == len(body["words"]) and ig["baseline"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"image": png(), "method": "magic"}, 422, "method"),
        ({"image": png(), "image_ref": {"probe_set": "productivity", "image_id": 0}}, 422, "request"),
        ({}, 422, "request"),
        ({"image": "not base64!"}, 400, "image"),
        ({"image": png(), "caption": "a zebra"}, 422, "caption"),
        ({"image": png(), "method": "integrated_gradients", "n_steps": 100_000}, 422, "n_steps"),
        ({"image": png(), "model": "nope"}, 404, "model"),
        ({"image_ref": {"probe_set": "nope", "image_id": 0}}, 404, "image_ref.probe_set"),
        ({"image_ref": {"probe_set": "productivity", "image_id": 10**9}}, 404, "image_ref.image_id"),
        ({"image": png(), "method": "attention", "attribute_to": "pixels"}, 422, "attribute_to"),
    ],
)
def test_bad_requests_name_the_field(client: TestClient, body: dict, status: int, field: str) -> None:  # type: ignore[type-arg]
    r = client.post("/v1/explain", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    fields = {d.get("field") for d in error.get("details", [])}
    assert field in fields or field in error["message"] or (field == "request" and status == 422), error


def test_the_key_is_required_and_full_slots_answer_429(client: TestClient, tiny_repo: Path) -> None:
    anonymous = client.post("/v1/explain", json={"image": png()}, headers={"Authorization": ""})
    assert anonymous.status_code == 401
    service = client.app.state.explain  # type: ignore[attr-defined]
    held = [service.gate.acquire() for _ in range(service.gate.limit)]  # every place taken
    try:
        r = client.post("/v1/explain", json={"image": png()})
    finally:
        for release in held:
            release()
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert r.json()["error"]["code"] == "too_many_explanations"
    assert client.post("/v1/captions", json={"images": [png()]}).status_code == 200  # captions go on
