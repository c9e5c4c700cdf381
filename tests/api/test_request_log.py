"""The request log: one JSON line per request on ``compcap.access`` with its id, route, status,
latency and model; ``X-Request-ID`` echoed when safe and generated otherwise; never the image bytes,
the query string or an API key."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.requestlog import request_id_of
from service.gateway.app import create_app
from service.logs import JsonFormatter
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png

KEY = "log-test-secret-key-42"


@contextlib.contextmanager
def access_log() -> Iterator[io.StringIO]:
    """What ``compcap.access`` writes inside the block, as the JSON formatter writes it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("compcap.access")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture(scope="module")
def client(tiny_repo: Path) -> Iterator[TestClient]:
    settings = Settings(repo=tiny_repo, intra_op_threads=1, api_keys=KEY, captions_require_key=True)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def test_one_json_line_per_request_with_the_clients_id(client: TestClient) -> None:
    with access_log() as stream:
        image = png(7)
        ok = client.post(
            "/v1/captions?beam_size=2",
            files=[("image", ("a.png", image, "image/png"))],
            headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "client-id.42"},
        )
        bad = client.post(
            "/v1/captions",
            json={"images": [base64.b64encode(b"not an image").decode()]},
            headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "bad id\twith tab"},
        )
        ready = client.get("/readyz")
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "client-id.42"
    assert bad.status_code == 400, bad.text
    generated = bad.headers["x-request-id"]
    assert generated != "bad id\twith tab" and len(generated) == 32
    assert ready.headers["x-request-id"] not in (generated, "client-id.42")

    text = stream.getvalue()
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["route"] for r in records] == ["/v1/captions", "/v1/captions", "/readyz"]
    first, second, third = records
    assert first["request_id"] == "client-id.42" and first["status"] == 200 and first["method"] == "POST"
    assert first["model"] and first["beam_size"] == 2 and first["images"] == 1 and first["latency_ms"] > 0
    assert first["logger"] == "compcap.access" and first["level"] == "info" and first["ts"].endswith("Z")
    assert second["request_id"] == generated and second["status"] == 400 and second["error"]
    assert third["status"] == 200 and "model" not in third
    # nothing secret or bulky reaches the log
    assert KEY not in text and "Bearer" not in text and "beam_size=2" not in text
    assert base64.b64encode(b"not an image").decode() not in text
    assert max(len(line) for line in text.splitlines()) < 400


def test_rejections_before_routing_are_logged_too(client: TestClient) -> None:
    with access_log() as stream:
        missing = client.get("/nowhere")
        unauthorised = client.post("/v1/captions", files=[("image", ("a.png", png(1), "image/png"))])
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["route"], r["status"]) for r in records] == [("unmatched", 404), ("/v1/captions", 401)]
    assert missing.headers["x-request-id"] == records[0]["request_id"]
    assert unauthorised.headers["x-request-id"] == records[1]["request_id"]


@pytest.mark.parametrize(
    ("header", "kept"),
    [(b"abc-123", True), (b"x" * 128, True), (b"x" * 129, False), (b"a b", False), (b"a\nb", False)],
)
def test_request_ids_are_echoed_only_when_safe(header: bytes, kept: bool) -> None:
    got = request_id_of([(b"X-Request-ID", header)])
    assert (got == header.decode()) is kept
    assert request_id_of([]) != request_id_of([])


def test_json_formatter_keeps_extra_fields_and_exceptions() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom %s", ("now",), None)
    record.request_id = "r1"
    record.color_message = "\x1b[36mboom\x1b[0m"  # uvicorn's coloured copy is dropped
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    body = json.loads(JsonFormatter().format(record))
    assert body["msg"] == "boom now" and body["request_id"] == "r1" and "ValueError: bad" in body["exc"]
    assert "color_message" not in body
