"""The stand-in server the bench's peers share (``loadtests.peers.stand_in``): a peer supplies only how it
prepares, captions and answers; the upload's decoding, its 400, the lock and the two probes are the
stand-in's, the same for every peer and for the HTTP floor."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from PIL import Image

from loadtests.peers.http_floor import create_app as floor_app
from loadtests.peers.stand_in import per_request_app, server_parser


def _png(height: int = 8, width: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _peer(calls: list[tuple[str, Any]]) -> TestClient:
    def prepare(picture: Image.Image, beam_size: int, n_best: int) -> tuple[int, int]:
        if n_best > beam_size:
            raise HTTPException(422, "n_best must be <= beam_size")
        calls.append(("prepare", picture.size))
        return picture.size

    def caption(size: tuple[int, int], beam_size: int, n_best: int) -> list[str]:
        calls.append(("caption", (beam_size, n_best)))
        return [f"{size[0]}x{size[1]} #{k}" for k in range(beam_size)]

    def respond(found: list[str], n_best: int) -> dict[str, Any]:
        return {"captions": [{"caption": text} for text in found[:n_best]]}

    return TestClient(per_request_app("test peer", prepare, caption, respond))


def test_a_peer_supplies_its_three_parts() -> None:
    calls: list[tuple[str, Any]] = []
    client = _peer(calls)
    ok = client.post("/v1/captions?beam_size=3&n_best=2", files={"image": ("x.png", _png(8, 6))})
    assert ok.status_code == 200
    assert ok.json() == {"captions": [{"caption": "6x8 #0"}, {"caption": "6x8 #1"}]}
    assert calls == [("prepare", (6, 8)), ("caption", (3, 2))]


def test_a_peer_refuses_junk_and_what_its_prepare_refuses() -> None:
    calls: list[tuple[str, Any]] = []
    client = _peer(calls)
    junk = client.post("/v1/captions", files={"image": ("x.png", b"not an image")})
    assert junk.status_code == 400 and "image" in junk.json()["detail"]
    wide = client.post("/v1/captions?beam_size=2&n_best=3", files={"image": ("x.png", _png())})
    assert wide.status_code == 422 and "n_best" in wide.json()["detail"]
    assert calls == []


@pytest.mark.parametrize("client", [_peer([]), TestClient(floor_app(8, 8))], ids=["peer", "floor"])
def test_every_stand_in_has_the_benchs_probes(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.text == ""


def test_the_floor_answers_without_a_caption() -> None:
    client = TestClient(floor_app(8, 8))
    ok = client.post("/v1/captions", files={"image": ("x.png", _png())})
    assert ok.status_code == 200 and ok.json()["floor"] is True and "captions" not in ok.json()
    assert client.post("/v1/captions", files={"image": ("x.png", b"junk")}).status_code == 400


def test_the_server_arguments() -> None:
    args = server_parser("peer", None, port=8100).parse_args(["--port", "9000"])
    assert (args.host, args.port) == ("127.0.0.1", 9000)
