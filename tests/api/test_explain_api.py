"""``POST /v1/explain`` through the real app on the tiny repository: uploads and probe-set images, the
grounding score where a scene graph exists, overlays that decode, clear 4xx errors, the key, and 429
with Retry-After when the explanation slots are full."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from service.explain import service as explain_service
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
    from service.probesets import repo_probe_sets

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
    intervals = body["grounding_score_interval"]  # over the caption's nouns: dog, grass
    assert list(intervals) == list(scores)
    for delta, found in intervals.items():
        assert found["nouns"] == 2 and found["low"] <= scores[delta] <= found["high"]
    dog = body["words"][1]
    assert dog["noun"] == "dog" and "under_argmax" in dog and isinstance(dog["grounded"], bool)
    assert body["words"][0]["grounded"] is None  # "a" is not a noun
    assert dog["overlay_png"] is None


def probe_image(client: TestClient, name: str = "productivity") -> tuple[str, dict[str, Any], int]:
    """A probe-set image as an upload would send it (base64 PNG at the served size), its scene graph
    and its id."""
    from service.manifest import load_manifest
    from service.probesets import repo_probe_sets

    repo = client.app.state.runtime.settings.repo  # type: ignore[attr-defined]
    manifest = load_manifest(repo)
    probe = repo_probe_sets(repo, manifest)[name]
    image_id = probe.image_ids[0]
    pixels = probe.images([image_id], manifest.image.height, manifest.image.width)[0]
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    assert probe.scenes is not None
    return base64.b64encode(buf.getvalue()).decode(), dict(probe.scenes[image_id]), image_id


def grounding(body: dict[str, Any]) -> tuple[Any, ...]:
    keys = ("word", "argmax_region", "under_argmax", "pointing", "pointing_chance", "grounded")
    return body["grounding_score"], [tuple(w.get(k) for k in keys) for w in body["words"]]


def test_an_uploads_scene_graph_grounds_it_as_its_probe_image(client: TestClient) -> None:
    """The same image uploaded with its scene graph (SceneWorld's form as generated, extra keys and all)
    is grounded exactly as by its probe-set reference: GroundingScore(δ), the pointing game, what lies
    under each word; boxes in another ``size`` are scaled to the served one."""
    image, scene, image_id = probe_image(client)
    caption = {"caption": "a dog on the grass", "overlays": False}
    by_ref = client.post(
        "/v1/explain", json={"image_ref": {"probe_set": "productivity", "image_id": image_id}, **caption}
    )
    uploaded = client.post("/v1/explain", json={"image": image, "scene_graph": scene, **caption})
    assert by_ref.status_code == 200 and uploaded.status_code == 200, (by_ref.text, uploaded.text)
    assert uploaded.json()["scene_graph"] is True and uploaded.json()["grounding_score"] is not None
    assert grounding(uploaded.json()) == grounding(by_ref.json())
    assert any(w["pointing"] is not None for w in uploaded.json()["words"]) == any(
        o["noun"] == "dog" for o in scene["objects"]
    )
    doubled = {
        **scene,
        "size": [192, 192],
        "horizon": scene["horizon"] * 2,
        "objects": [{**o, "bbox": [v * 2 for v in o["bbox"]]} for o in scene["objects"]],
    }
    scaled = client.post("/v1/explain", json={"image": image, "scene_graph": doubled, **caption})
    assert scaled.status_code == 200, scaled.text
    assert grounding(scaled.json()) == grounding(by_ref.json())
    # without a scene graph: no grounding
    plain = client.post("/v1/explain", json={"image": image, **caption}).json()
    assert plain["scene_graph"] is False and plain["grounding_score"] is None


def test_tokens_explain_exactly_the_caption_answered(client: TestClient) -> None:
    """``tokens`` (a caption's ids as ``POST /v1/captions`` answers them) explains those tokens: one entry
    per token, the same as the caption's text where that encodes back to them."""
    answer = client.post("/v1/captions", json={"images": [png(2)], "beam_size": 2}).json()
    best = answer["results"][0]["captions"][0]
    r = client.post("/v1/explain", json={"image": png(2), "tokens": best["tokens"], "overlays": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "client" and body["caption"] == best["text"]
    assert len(body["words"]) == len(best["tokens"])
    text = client.post("/v1/explain", json={"image": png(2), "caption": best["text"], "overlays": False})
    assert {**text.json(), "timings_ms": None} == {**body, "timings_ms": None}


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"tokens": [5], "caption": "a dog"}, "tokens", "at most one of caption and tokens"),
        ({"tokens": []}, "tokens", "tokens is empty"),
        ({"tokens": [1, 5]}, "tokens", "not caption tokens"),  # the start token
        ({"tokens": [10**6]}, "tokens", "not caption tokens"),
        ({"tokens": [-1]}, "tokens.0", "greater than or equal to 0"),
        ({"tokens": [5] * 100}, "tokens", "more than"),
        ({"scene_graph": {"objects": [], "background": "grass"}}, "scene_graph.horizon", "required"),
        (
            {
                "scene_graph": {
                    "objects": [{"id": 0, "noun": "dog", "bbox": [9, 0, 1, 4]}],
                    "background": "grass",
                    "horizon": 30,
                }
            },
            "scene_graph.objects.0",
            "x0 <= x1",
        ),
        (
            {"scene_graph": {"objects": [], "background": "grass", "horizon": 3, "size": [0, 9]}},
            "scene_graph.size",
            ">= 1",
        ),
    ],
)
def test_bad_tokens_and_scene_graphs_are_named(
    client: TestClient, extra: dict[str, Any], field: str, message: str
) -> None:
    r = client.post("/v1/explain", json={"image": png(), **extra})
    assert r.status_code == 422, r.text
    details = {d["field"]: d["message"] for d in r.json()["error"]["details"]}
    assert field in details and message in details[field], details


def test_a_probe_image_brings_its_own_scene_graph(client: TestClient) -> None:
    _, scene, image_id = probe_image(client)
    ref = {"probe_set": "productivity", "image_id": image_id}
    r = client.post("/v1/explain", json={"image_ref": ref, "scene_graph": scene})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["field"] == "scene_graph"


@pytest.mark.parametrize("method", ["saliency", "integrated_gradients"])
def test_gradient_methods(client: TestClient, method: str) -> None:
    if not explain_service.torch_available():  # the serve-only venv (make test's Python 3.12/3.13 runs)
        pytest.skip("the gradient methods need the 'explain' extra (torch, captum)")
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


def form(images: int, **fields: str) -> list[tuple[str, tuple[str | None, bytes | str, str | None]]]:
    """A multipart body: ``images`` PNG file parts ``image`` and ``fields`` as form fields."""
    parts: list[tuple[str, tuple[str | None, bytes | str, str | None]]] = [
        ("image", (f"{i}.png", base64.b64decode(png(i)), "image/png")) for i in range(images)
    ]
    return parts + [(name, (None, value, None)) for name, value in fields.items()]


def test_a_multipart_upload_is_explained_as_the_same_image_in_json(client: TestClient) -> None:
    """The image as a file part and the options as form fields (``hooks``, ``image_ref`` as JSON): the
    same answer as the JSON request."""
    hooks = [{"name": "no_repeat_ngram", "params": {"n": 2}}]
    options = {"beam_size": 2, "method": "attention", "overlay_scale": 1, "hooks": hooks}
    sent = client.post("/v1/explain", json={"image": png(0), **options})
    fields = {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}
    uploaded = client.post("/v1/explain", files=form(1, **fields))
    assert sent.status_code == 200 and uploaded.status_code == 200, (sent.text, uploaded.text)
    assert {**uploaded.json(), "timings_ms": None} == {**sent.json(), "timings_ms": None}
    assert uploaded.json()["words"][0]["overlay_png"]
    ref = {"probe_set": "productivity", "image_id": first_image(client)}
    caption = {"caption": "a dog on the grass", "overlays": "false"}
    by_ref = client.post("/v1/explain", files=form(0, image_ref=json.dumps(ref), **caption))
    assert by_ref.status_code == 200, by_ref.text
    assert by_ref.json()["scene_graph"] is True and by_ref.json()["words"][1]["overlay_png"] is None


@pytest.mark.parametrize(
    ("images", "fields", "field"),
    [
        (1, {"methd": "saliency"}, "methd"),  # with did you mean 'method'
        (1, {"image_ref": '{"probe_set": "productivity", "image_id": 0}'}, "request"),  # both
        (0, {"method": "attention"}, "request"),  # neither
        (2, {}, "image"),  # one image only
        (1, {"n_steps": "many"}, "n_steps"),
        (0, {"image_ref": "{not json"}, "image_ref"),
        (0, {"image_ref": '{"probe_set": "productivity", "image_idx": 1}'}, "image_ref.image_idx"),
        (1, {"image": "aGVsbG8="}, "image"),  # base64 in a text field: the image is a file part
    ],
)
def test_bad_multipart_requests_name_the_field(
    client: TestClient, images: int, fields: dict[str, str], field: str
) -> None:
    r = client.post("/v1/explain", files=form(images, **fields))
    assert r.status_code == 422, r.text
    assert field in {d["field"] for d in r.json()["error"]["details"]}, r.json()


@pytest.mark.parametrize(
    ("body", "field", "suggestion"),
    [
        ({"beamsize": 2}, "beamsize", "beam_size"),
        ({"method": "saliancy"}, "method", "saliency"),
        ({"atribute_to": "pixels"}, "atribute_to", "attribute_to"),
        ({"hooks": [{"name": "ban_word", "params": {"words": ["a"]}}]}, "hooks.0.name", "ban_words"),
        ({"hooks": [{"name": "ban_words", "params": {"word": ["a"]}}]}, "hooks.0.params.word", "words"),
        ({"model": "butdd"}, "model", "butd"),
    ],
)
def test_a_misspelt_field_or_choice_gets_did_you_mean(
    client: TestClient, body: dict[str, Any], field: str, suggestion: str
) -> None:
    r = client.post("/v1/explain", json={"image": png(), **body})
    assert r.status_code in (404, 422), r.text
    detail = r.json()["error"]["details"][0]
    assert detail["field"] == field and f"(did you mean '{suggestion}'?)" in detail["message"], detail


def test_a_misspelt_field_inside_an_object_is_named_by_its_dotted_path(client: TestClient) -> None:
    r = client.post("/v1/explain", json={"image_ref": {"probe_set": "productivity", "image_idx": 1}})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"] == [
        {"field": "image_ref.image_id", "message": "Field required"},
        {"field": "image_ref.image_idx", "message": "unknown field 'image_idx' (did you mean 'image_id'?)"},
    ]
