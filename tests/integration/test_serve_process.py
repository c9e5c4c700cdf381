"""Start ``compcap serve`` as a real process on an OS-assigned port, caption a PNG, always stop it."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tiny_repo: Path, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "serve.log").open("w+b")
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"server exited with {proc.returncode}:\n{log.read().decode()}")
            try:
                if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                raise AssertionError(f"server not ready in 60 s:\n{log.read().decode()}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


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
