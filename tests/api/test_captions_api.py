"""The HTTP API against a real tiny model repository (``tiny_repo``), in process."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from pydantic import ValidationError

import service
from service.api.schemas import CaptionResponse
from service.gateway.app import create_app
from service.manifest import Manifest
from service.settings import Settings
from tests.api.conftest import MAX_IMAGES, wait_ready
from tests.api.test_build_info_api import build_info_samples


def png(seed: int = 0, size: tuple[int, int] = (64, 48)) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="session")
def bomb_png() -> bytes:
    buf = io.BytesIO()
    Image.new("1", (10_000, 10_000)).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def post_images(client: TestClient, *blobs: bytes, **params: object):
    files = [("image", (f"{i}.png", b, "image/png")) for i, b in enumerate(blobs)]
    return client.post("/v1/captions", files=files, params={k: str(v) for k, v in params.items()})


def assert_valid_request_works(client: TestClient) -> None:
    response = post_images(client, png(99))
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["caption"]


def test_health_and_ready(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/readyz").status_code == 200


def test_one_image_multipart(client: TestClient, manifest: Manifest) -> None:
    response = post_images(client, png(1))
    assert response.status_code == 200, response.text
    body = response.json()
    default = manifest.captioner(manifest.default_captioner)
    assert body["model"] == default.name
    assert body["ranker"] == default.ranker
    assert body["beam_size"] == 5 and body["n_best"] == 5
    assert set(body["timings_ms"]) == {"decode_images", "encode", "decode", "rerank", "total"}
    (result,) = body["results"]
    assert result["index"] == 0
    captions = result["captions"]
    assert 1 <= len(captions) <= 5
    assert result["caption"] == captions[0]["text"] and result["caption"]
    vocab_size = manifest.vocabulary.size
    for c in captions:
        assert 1 <= len(c["tokens"]) <= body["max_length"]
        assert all(4 <= t < vocab_size for t in c["tokens"])  # no pad/bos/eos/unk
        assert c["logprob"] <= 0
        assert c["normalized_logprob"] == pytest.approx(c["logprob"] / len(c["tokens"]), rel=1e-5)
    assert sorted(c["beam_rank"] for c in captions) == list(range(1, len(captions) + 1))
    # written by pydantic's encoder (not FastAPI's second pass): still JSON, and exactly the documented
    # schema, every field present (none left out as unset or None)
    assert response.headers["content-type"] == "application/json"
    assert CaptionResponse.model_validate(body).model_dump(mode="json") == body


def test_two_images_multipart_match_single(client: TestClient) -> None:
    both = post_images(client, png(1), png(2), rerank="false").json()
    assert [r["index"] for r in both["results"]] == [0, 1]
    for i, seed in enumerate((1, 2)):
        alone = post_images(client, png(seed), rerank="false").json()
        assert both["results"][i]["caption"] == alone["results"][0]["caption"]


def test_json_base64_equals_multipart(client: TestClient) -> None:
    data = png(3)
    via_json = client.post("/v1/captions", json={"images": [base64.b64encode(data).decode()], "beam_size": 3})
    assert via_json.status_code == 200, via_json.text
    via_form = post_images(client, data, beam_size=3)
    assert via_json.json()["results"] == via_form.json()["results"]
    data_url = "data:image/png;base64," + base64.b64encode(data).decode()
    again = client.post("/v1/captions", json={"images": [data_url], "beam_size": 3})
    assert again.json()["results"] == via_form.json()["results"]


def test_parameters(client: TestClient) -> None:
    body = post_images(client, png(4), beam_size=2, n_best=1, max_length=3, length_penalty=0).json()
    assert (body["beam_size"], body["n_best"], body["max_length"], body["length_penalty"]) == (2, 1, 3, 0.0)
    (caption,) = body["results"][0]["captions"]
    assert len(caption["tokens"]) <= 3
    assert caption["normalized_logprob"] == pytest.approx(caption["logprob"])
    greedy = post_images(client, png(4), beam_size=1).json()
    assert len(greedy["results"][0]["captions"]) == 1


def test_n_best(client: TestClient) -> None:
    body = post_images(client, png(5), beam_size=4, n_best=2, rerank="false").json()
    captions = body["results"][0]["captions"]
    assert len(captions) == 2
    assert [c["beam_rank"] for c in captions] == [1, 2]
    assert captions[0]["normalized_logprob"] >= captions[1]["normalized_logprob"]


def test_rerank_off_and_default(client: TestClient, manifest: Manifest) -> None:
    with_ranker = [c for c in manifest.captioners if c.ranker]
    if not with_ranker:
        pytest.skip("no captioner with a jointly trained ranker")
    cap = with_ranker[0]
    off = post_images(client, png(6), model=cap.name, rerank="false").json()
    assert off["ranker"] is None
    captions = off["results"][0]["captions"]
    assert all(c["ranker_score"] is None for c in captions)
    assert [c["beam_rank"] for c in captions] == list(range(1, len(captions) + 1))

    on = post_images(client, png(6), model=cap.name).json()
    assert on["ranker"] == cap.ranker
    scored = on["results"][0]["captions"]
    scores = [c["ranker_score"] for c in scored]
    assert all(-1.0001 <= s <= 1.0001 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert on["results"][0]["caption"] == scored[0]["text"]
    assert {c["text"] for c in scored} == {c["text"] for c in captions}  # same beams, new order


def test_rerank_reads_every_beam_then_cuts_to_n_best(client: TestClient, manifest: Manifest) -> None:
    """beam_size=B, n_best=K re-ranks all B finished beams (Nikolaus et al., 2019, §5.4), not only the K
    most likely."""
    cap = next((c for c in manifest.captioners if c.ranker), None)
    if cap is None:
        pytest.skip("no captioner with a jointly trained ranker")
    pulled_up = 0
    for seed in range(8, 14):
        every = post_images(client, png(seed), model=cap.name, beam_size=12, n_best=12).json()["results"][0]
        top = post_images(client, png(seed), model=cap.name, beam_size=12, n_best=3).json()["results"][0]
        assert [c["text"] for c in top["captions"]] == [c["text"] for c in every["captions"][:3]]
        pulled_up += max(c["beam_rank"] for c in top["captions"]) > 3
    assert pulled_up, "the ranker never chose a beam outside the 3 most likely: the test shows nothing"

    weighted = post_images(client, png(8), model=cap.name, beam_size=12, rerank_weight=0.5).json()
    assert weighted["rerank_weight"] == 0.5
    combined = [c["ranker_score"] + 0.5 * c["normalized_logprob"] for c in weighted["results"][0]["captions"]]
    assert combined == sorted(combined, reverse=True)


def test_every_captioner_and_named_ranker(client: TestClient, manifest: Manifest) -> None:
    for cap in manifest.captioners:
        for ranker in [None, *[r.name for r in manifest.rankers]]:
            params: dict[str, object] = {"model": cap.name, "beam_size": 3}
            if ranker:
                params["rerank"] = ranker
            response = post_images(client, png(7), **params)
            assert response.status_code == 200, response.text
            assert response.json()["model"] == cap.name
            if ranker:
                assert response.json()["ranker"] == ranker


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] and body["error"]["message"]
    return body["error"]


def bad_requests(client: TestClient, bomb: bytes) -> dict[str, tuple[Callable[[], Any], int, str, str]]:
    data = png(8, (200, 200))
    b64 = base64.b64encode(png()).decode()

    def form(*blobs: bytes, **params: object) -> Callable[[], Any]:
        return lambda: post_images(client, *blobs, **params)

    def raw(**kwargs: Any) -> Callable[[], Any]:
        return lambda: client.post("/v1/captions", **kwargs)

    json_type = {"content-type": "application/json"}
    other_file = [("other", ("a.png", png(), "image/png"))]
    too_many = [png(i) for i in range(MAX_IMAGES + 1)]
    return {
        "non_image": (form(b"definitely not an image"), 400, "not_an_image", "image"),
        "truncated_png": (form(data[: len(data) // 2]), 400, "corrupt_image", "truncated"),
        "empty_upload": (form(b""), 400, "empty_image", "empty"),
        "bomb": (form(bomb), 413, "too_many_pixels", "10000x10000"),
        "unknown_model": (form(png(), model="nope"), 404, "unknown_model", "nope"),
        "unknown_ranker": (form(png(), rerank="nope"), 404, "unknown_model", "nope"),
        "beam_0": (form(png(), beam_size=0), 422, "validation_error", "beam_size"),
        "beam_101": (form(png(), beam_size=101), 422, "validation_error", "beam_size"),
        "beam_json": (raw(json={"images": [b64], "beam_size": 101}), 422, "validation_error", "beam_size"),
        "rerank_weight_negative": (form(png(), rerank_weight=-1), 422, "validation_error", "rerank_weight"),
        "rerank_weight_unranked": (
            form(png(), rerank="false", rerank_weight=0.1),
            422,
            "invalid_parameter",
            "rerank_weight",
        ),
        "n_best_gt_beam": (form(png(), beam_size=2, n_best=3), 422, "invalid_parameter", "n_best"),
        "max_length_big": (form(png(), max_length=10_000), 422, "invalid_parameter", "max_length"),
        "length_penalty": (form(png(), length_penalty=3), 422, "validation_error", "length_penalty"),
        "unknown_param": (form(png(), beam=3), 422, "validation_error", "beam"),
        "no_image_multipart": (raw(files=other_file), 422, "no_image", "image"),
        "no_image_json": (raw(json={"images": []}), 422, "no_image", "image"),
        "no_body": (raw(), 422, "no_image", "image"),
        "bad_base64": (raw(json={"images": ["@@not base64@@"]}), 400, "invalid_base64", "images.0"),
        "bad_json": (raw(content=b"{nope", headers=json_type), 400, "invalid_json", "JSON"),
        "wrong_type": (raw(json={"images": "abc"}), 422, "validation_error", "images"),
        "too_many": (form(*too_many), 422, "too_many_images", str(MAX_IMAGES)),
        "media_type": (
            raw(content=b"x", headers={"content-type": "text/plain"}),
            415,
            "unsupported_media_type",
            "json",
        ),
    }


BAD_CASES = [
    "non_image", "truncated_png", "empty_upload", "bomb", "unknown_model", "unknown_ranker", "beam_0",
    "beam_101", "beam_json", "rerank_weight_negative", "rerank_weight_unranked",
    "n_best_gt_beam", "max_length_big", "length_penalty", "unknown_param",
    "no_image_multipart", "no_image_json", "no_body", "bad_base64", "bad_json", "wrong_type", "too_many",
    "media_type",
]  # fmt: skip


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_then_valid_request(client: TestClient, bomb_png: bytes, case: str) -> None:
    send, status, code, mentions = bad_requests(client, bomb_png)[case]
    response = send()
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["code"] == code
    assert mentions.lower() in error["message"].lower()
    assert_valid_request_works(client)


@pytest.mark.parametrize("form", [True, False])
def test_a_misspelt_option_gets_did_you_mean(client: TestClient, form: bool) -> None:
    """An unknown query parameter or body field close to an option is answered with the option's
    name; one far from every option is only named."""
    image = [base64.b64encode(png(3)).decode()]
    for params, body, field, message in [
        ({"beamsize": "3"}, {}, "beamsize", "unknown field 'beamsize' (did you mean 'beam_size'?)"),
        ({}, {"nbest": "2"}, "nbest", "unknown field 'nbest' (did you mean 'n_best'?)"),
        ({}, {"colour": "red"}, "colour", "unknown field 'colour'"),
    ]:
        if form:
            response = client.post(
                "/v1/captions", params=params, files=[("image", ("a.png", png(3), "image/png"))], data=body
            )
        else:
            response = client.post("/v1/captions", params=params, json={"images": image, **body})
        assert response.status_code == 422, response.text
        assert error_of(response)["details"] == [{"field": field, "message": message}]


def test_unknown_route_is_json(client: TestClient) -> None:
    response = client.get("/v1/nothing")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"


def test_models(client: TestClient, manifest: Manifest) -> None:
    body = client.get("/v1/models").json()
    assert body["default_captioner"] == manifest.default_captioner
    assert [c["name"] for c in body["captioners"]] == [c.name for c in manifest.captioners]
    assert [r["name"] for r in body["rankers"]] == [r.name for r in manifest.rankers]
    for info, cap in zip(body["captioners"], manifest.captioners, strict=True):
        assert info["architecture"] == cap.architecture
        assert info["default_ranker"] == cap.ranker
        assert info["training"]["split"] == cap.training.split
        assert len(info["training"]["held_out_pairs"]) == len(cap.training.held_out_pairs)
        assert "quality" in info
    assert body["precision"] == "fp32" and body["quantized_models"] == []


def test_models_name_the_pairs_they_never_saw(client: TestClient) -> None:
    """The default build trains captioners and rankers on systematicity group 1 (Nikolaus et al., 2019,
    Table 1)."""
    body = client.get("/v1/models").json()
    group_1 = {
        ("adjective", "black", "cat"),
        ("adjective", "big", "bird"),
        ("adjective", "red", "bus"),
        ("adjective", "small", "plane"),
        ("verb", "eat", "man"),
        ("verb", "lie", "woman"),
    }
    for entry in [*body["captioners"], *body["rankers"]]:
        assert entry["training"]["split"] == "systematicity/1", entry["name"]
        pairs = {(p["kind"], p["modifier"], p["noun"]) for p in entry["training"]["held_out_pairs"]}
        assert pairs == group_1, entry["name"]


def test_metrics(client: TestClient) -> None:
    assert_valid_request_works(client)
    post_images(client, b"junk")
    text = client.get("/metrics").text
    for name in (
        "compcap_request_latency_seconds_bucket",
        'le="10.0"',
        "compcap_captions_served_total",
        "compcap_errors_total",
        'reason="not_an_image"',
        "compcap_beam_rows_per_decoder_call_bucket",
        "compcap_model_call_seconds_bucket",
        'model="visual_encoder"',
        'method="POST",route="/v1/captions",status="200"',
        'method="POST",route="/v1/captions",status="400"',
        "compcap_iterations_per_request_bucket",
        "compcap_queue_wait_seconds_bucket",
        "compcap_active_requests",
        "compcap_queue_length",
        "compcap_decoded_tokens_total",
    ):
        assert name in text, name


def test_not_ready_before_load(tiny_repo: Path) -> None:
    client = TestClient(create_app(Settings(repo=tiny_repo)))  # no lifespan: nothing loads
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["status"] == "loading"
    response = post_images(client, png())
    assert response.status_code == 503 and error_of(response)["code"] == "not_ready"


class SlowBackend:
    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        await asyncio.sleep(self.delay)
        raise AssertionError("the deadline should have fired first")

    async def close(self) -> None:
        return None


def test_deadline_gives_504(tiny_repo: Path) -> None:
    app = create_app(Settings(repo=tiny_repo, request_deadline_s=0.2), backend=SlowBackend(5.0))
    with TestClient(app) as client:
        start = time.monotonic()
        response = post_images(client, png())
        assert time.monotonic() - start < 3.0
        assert response.status_code == 504
        assert error_of(response)["code"] == "deadline_exceeded"
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"default_beam_size": 0}, "default_beam_size"),
        ({"backend": "tensorflow"}, "backend"),
        ({"port": 70000}, "port"),
        ({"request_deadline_s": 0}, "request_deadline_s"),
        ({"repo": "/nonexistent/repo"}, "repo"),
    ],
)
def test_settings_reject_bad_values(tiny_repo: Path, overrides: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(**{"repo": tiny_repo, **overrides})


def test_settings_from_environment(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPCAP_REPO", str(tiny_repo))
    monkeypatch.setenv("COMPCAP_DEFAULT_BEAM_SIZE", "3")
    assert Settings().default_beam_size == 3
    monkeypatch.setenv("COMPCAP_MAX_UPLOAD_BYTES", "-1")
    with pytest.raises(ValidationError, match="max_upload_bytes"):
        Settings()


def test_operator_max_beam_size(tiny_repo: Path) -> None:
    """COMPCAP_MAX_BEAM_SIZE caps beam_size below the API's ceiling; a default above it fails at start-up."""
    with pytest.raises(ValueError, match="default_beam_size"):
        Settings(repo=tiny_repo, max_beam_size=4)
    app = create_app(Settings(repo=tiny_repo, max_beam_size=8, default_beam_size=3, intra_op_threads=1))
    with TestClient(app) as capped:
        wait_ready(capped)
        assert post_images(capped, png(1), beam_size=8).status_code == 200
        refused = post_images(capped, png(1), beam_size=9)
        assert refused.status_code == 422 and error_of(refused)["details"][0]["field"] == "beam_size"


def test_metrics_export_the_build_info(client: TestClient, tiny_repo: Path) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    digest = hashlib.sha256((tiny_repo / "manifest.json").read_bytes()).hexdigest()[:12]
    assert build_info_samples(response.text) == [
        {"version": service.__version__, "model_repo_digest": digest, "value": "1.0"}
    ]
