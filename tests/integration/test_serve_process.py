"""Start ``compcap serve`` as a real process on an OS-assigned port (the ``server`` fixture of
``conftest.py``), caption a PNG, always stop it; its log is JSON lines, one per request."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.integration


def png() -> bytes:
    arr = np.random.default_rng(0).integers(0, 256, size=(40, 60, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_serve_captions_a_png(server: str, tmp_path: Path) -> None:
    response = httpx.post(
        f"{server}/v1/captions",
        files={"image": ("x.png", png(), "image/png")},
        headers={"X-Request-ID": "serve-test-1"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["results"][0]["caption"]
    bad = httpx.post(f"{server}/v1/captions", files={"image": ("x.png", b"junk", "image/png")}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "not_an_image"
    again = httpx.post(f"{server}/v1/captions", files={"image": ("x.png", png(), "image/png")}, timeout=30)
    assert again.json()["results"] == body["results"]
    metrics = httpx.get(f"{server}/metrics", timeout=10).text
    assert "compcap_captions_served_total" in metrics

    # the process log: JSON lines only; one access line per request, carrying the request ids
    # (a request's line is written once its response has gone out: wait for the last one)
    deadline = time.monotonic() + 60  # a guard against a hang, not a speed bound
    while True:
        text = (tmp_path / "serve.log").read_text()
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        access = [r for r in lines if r["logger"] == "compcap.access" and r["route"] != "/readyz"]
        if len(access) >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [(r["route"], r["status"]) for r in access] == [
        ("/v1/captions", 200),
        ("/v1/captions", 400),
        ("/v1/captions", 200),
        ("/metrics", 200),
    ]
    assert access[0]["request_id"] == "serve-test-1" and access[0]["model"]
    assert access[1]["request_id"] == bad.headers["x-request-id"] and access[1]["error"] == "not_an_image"
    assert any(r["logger"].startswith("uvicorn") for r in lines)  # uvicorn's own lines are JSON too
