"""``POST /v1/compare`` and the live shadow comparison through the real app on the tiny repository:
captions per configuration equal what /v1/captions gives for the same options, pairwise NGSM, images
most discrepant first, clear 4xx errors, 429 when full; with a shadow configured, sampled caption
requests are decoded again after the response, the similarity histogram counts them and the reservoir
keeps the most discrepant images within its bounds."""

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
from pydantic import ValidationError

from service.compare.ngsm import ngsm, ngsm_orders, ngsm_profile
from service.gateway.app import create_app
from service.settings import Settings
from tests.api.conftest import wait_ready

KEY = "compare-key-1"
BAN = {"name": "ban_words", "params": {"words": ["a"]}}


@pytest.fixture(scope="module")
def client(tiny_repo: Path) -> Iterator[TestClient]:
    app = create_app(Settings(repo=tiny_repo, intra_op_threads=1, api_keys=KEY))
    with TestClient(app, headers={"Authorization": f"Bearer {KEY}"}) as c:
        wait_ready(c)
        yield c


def png(seed: int) -> str:
    arr = np.random.default_rng(seed).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def configs() -> list[dict]:
    return [
        {"name": "BUTD", "model": "butd", "beam_size": 3},
        {"name": "BUTR", "model": "butr", "beam_size": 3, "rerank": False},
        {"name": "WEAK", "model": "butd", "beam_size": 1, "hooks": [BAN]},
    ]


def test_compare_gives_each_configurations_caption_and_orders_by_discrepancy(client: TestClient) -> None:
    images = [png(s) for s in range(4)]
    r = client.post("/v1/compare", json={"images": images, "configurations": configs()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["name"] for c in body["configurations"]] == ["BUTD", "BUTR", "WEAK"]
    assert body["configurations"][1]["resolved"]["ranker"] is None
    rows = body["images"]
    assert sorted(row["index"] for row in rows) == [0, 1, 2, 3]
    mins = [row["min_ngsm"] for row in rows]
    assert mins == sorted(mins)  # most discrepant first
    for row in rows:
        assert len(row["pairs"]) == 3
        for pair in row["pairs"]:
            a, b = row["captions"][pair["a"]], row["captions"][pair["b"]]
            assert pair["ngsm"] == pytest.approx(ngsm(a, b))
            assert pair["orders"] == ngsm_orders(a, b) and len(pair["orders"]) == 4  # NGSM_n, n = 1..4
        assert "a" not in row["captions"]["WEAK"].split()  # its hook applied
    # a configuration decodes exactly as /v1/captions with the same options
    first = rows[0]
    cap = client.post(
        "/v1/captions",
        json={"images": [images[first["index"]]], "model": "butr", "beam_size": 3, "rerank": False},
    )
    assert cap.status_code == 200, cap.text
    assert cap.json()["results"][0]["captions"][0]["text"] == first["captions"]["BUTR"]


@pytest.mark.parametrize(
    ("configurations", "status", "field"),
    [
        ([{"name": "A", "model": "butd"}], 422, None),  # fewer than two
        ([{"name": "A", "model": "butd"}, {"name": "A", "model": "butr"}], 422, "configurations"),
        ([{"name": "A", "model": "butd"}, {"name": "B", "model": "nope"}], 404, "configurations.1.model"),
        ([{"name": "A", "model": "butd"}, {"name": "B", "model": "butr", "beam_size": 0}], 422, None),
        (
            [{"name": "A", "model": "butd"}, {"name": "B", "model": "butd", "n_best": 9, "beam_size": 2}],
            422,
            "configurations.1.n_best",
        ),
        ([{"name": "A b", "model": "butd"}, {"name": "B", "model": "butd"}], 422, None),
    ],
)
def test_bad_configurations_are_named(
    client: TestClient, configurations: list[dict], status: int, field: str | None
) -> None:
    r = client.post("/v1/compare", json={"images": [png(0)], "configurations": configurations})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    if field is not None:
        assert error["details"][0]["field"] == field, error


def test_bad_images_and_limits(client: TestClient) -> None:
    r = client.post("/v1/compare", json={"images": ["%%%"], "configurations": configs()})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_base64"
    r = client.post("/v1/compare", json={"images": [], "configurations": configs()})
    assert r.status_code == 422
    r = client.post("/v1/compare", json={"images": [png(0)] * 17, "configurations": configs()})
    assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_images"
    many = [{"name": f"C{i}", "model": "butd"} for i in range(9)]
    r = client.post("/v1/compare", json={"images": [png(0)], "configurations": many})
    assert r.status_code == 422 and r.json()["error"]["code"] == "too_many_configurations"


def test_full_slots_answer_429_and_the_key_is_required(client: TestClient) -> None:
    service = client.app.state.compare  # type: ignore[attr-defined]
    held = [service.gate.acquire() for _ in range(service.gate.limit)]  # every place taken
    try:
        r = client.post("/v1/compare", json={"images": [png(0)], "configurations": configs()})
    finally:
        for release in held:
            release()
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    r = client.post(
        "/v1/compare", json={"images": [png(0)], "configurations": configs()}, headers={"Authorization": ""}
    )
    assert r.status_code == 401
    assert client.get("/v1/compare/shadow").status_code == 404  # no shadow configured


def shadow_app(tiny_repo: Path, **extra: object) -> TestClient:
    settings = Settings(
        repo=tiny_repo,
        intra_op_threads=1,
        shadow_model='WEAK={"model": "butd", "beam_size": 1, "hooks": ' + json.dumps([BAN]) + "}",
        shadow_rate=1.0,
        **extra,  # type: ignore[arg-type]
    )
    return TestClient(create_app(settings))


def test_the_shadow_compares_live_requests_and_keeps_the_most_discrepant(tiny_repo: Path) -> None:
    with shadow_app(tiny_repo, shadow_reservoir_size=3) as c:
        wait_ready(c)
        shadow = c.app.state.shadow  # type: ignore[attr-defined]
        engine = c.app.state.runtime.engine  # type: ignore[attr-defined]
        primary: dict[int, str] = {}
        for seed in range(8):
            r = c.post("/v1/captions", json={"images": [png(seed)], "model": "butd", "beam_size": 3})
            assert r.status_code == 200, r.text
            primary[seed] = r.json()["results"][0]["captions"][0]["text"]
        c.portal.call(shadow.drain)  # type: ignore[union-attr]
        snap = c.get("/v1/compare/shadow").json()
        expected = []  # the shadow configuration asked directly, image by image (not shadowed itself)
        shadow.rate = 0.0
        for seed in range(8):
            r = c.post(
                "/v1/captions", json={"images": [png(seed)], "model": "butd", "beam_size": 1, "hooks": [BAN]}
            )
            expected.append(ngsm_profile(primary[seed], r.json()["results"][0]["captions"][0]["text"]))
        c.portal.call(shadow.drain)  # type: ignore[union-attr]
        metrics = c.get("/metrics").text
    assert engine is not None
    assert snap["seen"] == 8 and len(snap["items"]) == 3 and snap["bytes"] <= snap["max_bytes"]
    sims = [item["similarity"] for item in snap["items"]]
    assert sims == sorted(sims)
    # the reservoir holds the three lowest similarities of the eight compared
    assert sims == pytest.approx([e[0] for e in sorted(expected)[:3]], abs=1e-6)
    line = 'compcap_shadow_similarity_count{primary="butd",shadow="WEAK"} 8.0'
    assert line in metrics
    assert 'compcap_shadow_requests_total{outcome="compared",primary="butd",shadow="WEAK"} 8.0' in metrics
    kept = {item["primary"]["caption"] for item in snap["items"]}
    assert kept <= set(primary.values())
    for item in snap["items"]:
        assert "a" not in item["shadow"]["caption"].split()
        thumb = Image.open(io.BytesIO(base64.b64decode(item["image_png"])))
        assert max(thumb.size) <= 64
        assert item["similarity"] == pytest.approx(
            ngsm(item["primary"]["caption"], item["shadow"]["caption"]), abs=1e-6
        )


def test_shadow_settings_are_validated(tiny_repo: Path) -> None:
    """The compare feature parses its shadow as it installs: ``create_app`` fails naming the setting."""
    with pytest.raises(
        ValidationError, match="shadow_model: unknown captioner 'nope'; captioners: butr, butd"
    ):
        create_app(Settings(repo=tiny_repo, shadow_model="nope", intra_op_threads=1))
    with pytest.raises(ValidationError, match=r"shadow_model\n  Value error, "):
        create_app(Settings(repo=tiny_repo, shadow_model="X={not json", intra_op_threads=1))
    with pytest.raises(ValueError, match="shadow_rate"):
        Settings(repo=tiny_repo, shadow_model="butd", shadow_rate=1.5)


def files(*seeds: int, **fields: str) -> list[tuple[str, tuple[str | None, bytes | str, str | None]]]:
    """A multipart body: one ``image`` file part per seed and ``fields`` as form fields."""
    parts: list[tuple[str, tuple[str | None, bytes | str, str | None]]] = [
        ("image", (f"{s}.png", base64.b64decode(png(s)), "image/png")) for s in seeds
    ]
    return parts + [(name, (None, value, None)) for name, value in fields.items()]


def test_a_multipart_comparison_answers_as_the_same_images_in_json(client: TestClient) -> None:
    """Repeated ``image`` file parts and ``configurations`` as a JSON form field: the same answer."""
    sent = client.post("/v1/compare", json={"images": [png(5), png(6)], "configurations": configs()})
    uploaded = client.post("/v1/compare", files=files(5, 6, configurations=json.dumps(configs())))
    assert sent.status_code == 200 and uploaded.status_code == 200, (sent.text, uploaded.text)
    assert {**uploaded.json(), "timings_ms": None} == {**sent.json(), "timings_ms": None}


@pytest.mark.parametrize(
    ("parts", "status", "code", "field"),
    [
        (files(configurations="[{"), 422, "validation_error", "configurations"),
        (files(configurations=json.dumps(configs())), 422, "no_image", "image"),
        (files(*range(17), configurations=json.dumps(configs())), 422, "too_many_images", "image"),
        (files(0, configurations=json.dumps(configs()[:1])), 422, "validation_error", "configurations"),
        (files(0, configuration=json.dumps(configs())), 422, "validation_error", "configuration"),
        (files(0, configurations=json.dumps(configs()), images="x"), 422, "validation_error", "images"),
    ],
)
def test_bad_multipart_comparisons_name_the_field(
    client: TestClient, parts: list[Any], status: int, code: str, field: str
) -> None:
    r = client.post("/v1/compare", files=parts)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and field in {d["field"] for d in error["details"]}, error


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (
            {"configuration": configs()},
            "configuration",
            "unknown field 'configuration' (did you mean 'configurations'?)",
        ),
        (
            {"configurations": [configs()[0], {"name": "B", "model": "butd", "beamsize": 2}]},
            "configurations.1.beamsize",
            "unknown field 'beamsize' (did you mean 'beam_size'?)",
        ),
        (
            {"configurations": [configs()[0], {"name": "B", "model": "butd", "rerank": "butrr"}]},
            "configurations.1.rerank",
            "B: unknown ranker 'butrr' (did you mean 'butr'?); rankers: butr, vsepp",
        ),
        (
            {"configurations": [configs()[0], {**configs()[2], "hooks": [{"name": "ban_word"}]}]},
            "configurations.1.hooks.0.name",
            "(did you mean 'ban_words'?)",
        ),
    ],
)
def test_a_misspelt_field_gets_did_you_mean_at_its_dotted_path(
    client: TestClient, body: dict[str, Any], field: str, message: str
) -> None:
    r = client.post("/v1/compare", json={"images": [png(0)], **body})
    assert r.status_code in (404, 422), r.text
    detail = next(d for d in r.json()["error"]["details"] if d["field"] == field)
    assert message in detail["message"], detail
