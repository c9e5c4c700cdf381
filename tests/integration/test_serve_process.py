"""Start ``compcap serve`` as a real process on an OS-assigned port (the ``server`` fixture of
``conftest.py``), caption a PNG, always stop it."""

from __future__ import annotations

import io

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


def test_serve_captions_a_png(server: str) -> None:
    response = httpx.post(f"{server}/v1/captions", files={"image": ("x.png", png(), "image/png")}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["results"][0]["caption"]
    bad = httpx.post(f"{server}/v1/captions", files={"image": ("x.png", b"junk", "image/png")}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "not_an_image"
    again = httpx.post(f"{server}/v1/captions", files={"image": ("x.png", png(), "image/png")}, timeout=30)
    assert again.json()["results"] == body["results"]
    metrics = httpx.get(f"{server}/metrics", timeout=10).text
    assert "compcap_captions_served_total" in metrics
