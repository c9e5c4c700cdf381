"""Start ``compcap serve`` as a real process on an OS-assigned port (the ``server`` fixture of
``conftest.py``), caption a PNG, always stop it; its log is JSON lines, one per request."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.integration.conftest import free_port, serving_process

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


def read_answer(conn: socket.socket) -> str:
    """One HTTP answer: its head, then as many body bytes as its Content-Length says (the head and the
    body may come in separate segments: one ``recv`` got the head alone on a loaded machine)."""
    data = b""
    while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length and (chunk := conn.recv(65536)):
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()


def test_a_stalled_upload_is_answered_and_the_shutdown_is_logged(tiny_repo: Path, tmp_path: Path) -> None:
    """A client sends half a body to a route with no deadline of its own and waits: the request is
    answered 408 ``body_timeout`` once no part of its body has come for the request deadline (here
    2 s), not held for as long as the client keeps the connection (which also kept a stopping gateway
    alive). Then SIGTERM: the process exits and the queued log has every line, the shutdown's included
    (uvicorn raises the SIGTERM again once it has shut down, whose default action skips ``atexit``:
    those lines were lost)."""
    port = free_port()
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1", "COMPCAP_REQUEST_DEADLINE_S": "2"}
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    log_path = tmp_path / "serve.log"
    with serving_process(cmd, env, port, log_path) as (url, proc):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
            head = "POST /v1/explain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            stalled.sendall(f'{head}Content-Length: 1000\r\n\r\n{{"model": '.encode())
            answer = read_answer(stalled)  # the 30 s socket timeout guards against a hang
        after = httpx.post(f"{url}/v1/captions", files={"image": ("x.png", png(), "image/png")}, timeout=30)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)  # a guard against a hang, not a speed bound
    assert answer.startswith("HTTP/1.1 408"), answer
    assert json.loads(answer.split("\r\n\r\n", 1)[1])["error"]["code"] == "body_timeout"
    assert after.status_code == 200, after.text  # and the gateway went on serving
    assert code == -signal.SIGTERM, log_path.read_text()  # uvicorn raises the signal again once it is done
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    messages = [line["msg"] for line in lines]
    # uvicorn's last line comes just before it raises the signal again: lost without the handler
    assert "Application shutdown complete." in messages and "Finished server process" in messages[-1], lines
    assert any(line.get("route") == "/v1/explain" and line.get("status") == 408 for line in lines), lines
