"""A raw image body on ``/v1/captions`` gives the multipart caption of the same image, its options from
the query; an empty, oversized or non-image body is a clear 4xx. CORS: none by default; with
``COMPCAP_CORS_ORIGINS`` an allowed origin's preflight and request get their headers, another origin
none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.gateway.app import create_app
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png

ORIGIN = "https://app.example.org"


@pytest.fixture(scope="module")
def cors_client(tiny_repo: Path) -> Iterator[TestClient]:
    settings = Settings(repo=tiny_repo, intra_op_threads=1, cors_origins=f"{ORIGIN}, https://other.example")
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def test_a_raw_image_body_is_the_multipart_caption(client: TestClient) -> None:
    image = png(3)
    query = {"model": "butd", "beam_size": "3", "n_best": "2"}
    form = client.post("/v1/captions", params=query, files={"image": ("x.png", image, "image/png")})
    assert form.status_code == 200, form.text
    for content_type in ("image/png", "application/octet-stream", "image/png; charset=binary"):
        raw = client.post("/v1/captions", params=query, content=image, headers={"content-type": content_type})
        assert raw.status_code == 200, raw.text
        assert raw.json()["results"] == form.json()["results"]
        assert raw.json()["model"] == "butd" and raw.json()["n_best"] == 2


def test_a_bad_raw_body_is_a_4xx_naming_the_problem(client: TestClient) -> None:
    empty = client.post("/v1/captions", content=b"", headers={"content-type": "image/png"})
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "no_image"
    junk = client.post("/v1/captions", content=b"not a png", headers={"content-type": "image/png"})
    assert junk.status_code == 400 and junk.json()["error"]["code"] == "not_an_image"
    big = client.post(
        "/v1/captions", content=b"\0" * (9 * 1024 * 1024), headers={"content-type": "image/png"}
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    option = client.post(
        "/v1/captions", params={"beam_size": "0"}, content=png(1), headers={"content-type": "image/png"}
    )
    assert option.status_code == 422 and "beam_size" in option.text
    other = client.post("/v1/captions", content=b"x", headers={"content-type": "text/plain"})
    assert other.status_code == 415 and "image/*" in other.json()["error"]["message"]
    assert (
        client.post("/v1/captions", content=png(2), headers={"content-type": "image/png"}).status_code == 200
    )


def test_no_cors_headers_by_default(client: TestClient) -> None:
    r = client.get("/v1/models", headers={"origin": ORIGIN})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    pre = client.options("/v1/captions", headers={"origin": ORIGIN, "access-control-request-method": "POST"})
    assert "access-control-allow-origin" not in pre.headers


def test_an_allowed_origin_gets_cors_headers_and_another_none(cors_client: TestClient) -> None:
    pre = cors_client.options(
        "/v1/captions",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type,authorization",
        },
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    r = cors_client.post(
        "/v1/captions", content=png(4), headers={"content-type": "image/png", "origin": ORIGIN}
    )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
    stranger = cors_client.get("/v1/models", headers={"origin": "https://evil.example"})
    assert "access-control-allow-origin" not in stranger.headers
    refused = cors_client.options(
        "/v1/captions", headers={"origin": "https://evil.example", "access-control-request-method": "POST"}
    )
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
