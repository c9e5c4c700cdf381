"""Scheduling through the HTTP layer: a client that disconnects frees its rows (the ASGI app is
called directly with a ``receive`` that reports ``http.disconnect`` mid-decode), and a full queue
answers 503 with Retry-After. ``SlowBackend`` wraps the real onnxruntime backend and only adds a
delay to each step call so that a decode lasts long enough."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings
from tests.api.test_captions_api import png


class SlowBackend:
    def __init__(self, inner: OnnxRuntimeBackend, step_delay_s: float) -> None:
        self.inner, self.step_delay_s = inner, step_delay_s
        self.calls: list[str] = []

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(model)
        if model.endswith("_step"):
            await asyncio.sleep(self.step_delay_s)
        return await self.inner.infer(model, inputs)

    async def close(self) -> None:
        return None


def _scope(body: bytes) -> dict[str, Any]:
    """The ASGI scope of a JSON POST /v1/captions with ``body``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/captions",
        "raw_path": b"/v1/captions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 80),
    }


def test_disconnect_frees_rows(tiny_repo: Path) -> None:
    manifest = load_manifest(tiny_repo)
    backend = SlowBackend(OnnxRuntimeBackend(tiny_repo, manifest, threads=1), step_delay_s=0.05)
    app = create_app(Settings(repo=tiny_repo), backend=backend)
    runtime = app.state.runtime
    body = json.dumps(
        {"images": [base64.b64encode(png(1)).decode()], "model": "butd", "beam_size": 5}
    ).encode()
    scope = _scope(body)

    async def run() -> list[dict[str, Any]]:
        gone = asyncio.Event()
        sent_body = False
        messages: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        call = asyncio.create_task(app(scope, receive, send))
        sched = runtime.engine.scheduler("butd")
        for _ in range(200):
            if sched.active_requests:
                break
            await asyncio.sleep(0.01)
        assert sched.active_requests == 1, "the request never started decoding"
        iterations = sched.iterations
        gone.set()
        await asyncio.wait_for(call, timeout=5)
        for _ in range(1000):  # the scheduler drops the request at its next step, whenever that runs
            if sched.active_requests == 0 and sched._reserved_rows == 0:
                break
            await asyncio.sleep(0.01)
        assert sched.active_requests == 0 and sched._reserved_rows == 0
        assert sched.iterations - iterations <= 2, "the scheduler kept decoding a gone client's rows"
        await runtime.engine.close()
        return messages

    messages = asyncio.run(run())
    start = next(m for m in messages if m["type"] == "http.response.start")
    assert start["status"] == 499
    exposition = runtime.metrics.exposition().decode()
    assert "client_disconnected" in exposition
    pattern = r'compcap_abandoned_requests_total\{model="butd",reason="disconnect",stage="(\w+)"\} 1.0'
    assert re.findall(pattern, exposition) in (["encoding"], ["decoding"])  # once, in the stage it was in


def test_a_caller_gone_before_its_images_are_decoded_costs_no_model_call(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work not yet started is never started: its images are not decoded, the request never
    reaches the scheduler."""
    import service.gateway.routes as routes

    decoded: list[int] = []
    real_decode = routes.decode_uploads

    async def counting_decode(blobs: Any, *args: Any) -> Any:
        decoded.append(len(blobs))
        return await real_decode(blobs, *args)

    monkeypatch.setattr(routes, "decode_uploads", counting_decode)
    manifest = load_manifest(tiny_repo)
    backend = SlowBackend(OnnxRuntimeBackend(tiny_repo, manifest, threads=1), step_delay_s=0.0)
    app = create_app(Settings(repo=tiny_repo), backend=backend)
    runtime = app.state.runtime
    images = [base64.b64encode(png(i)).decode() for i in range(4)]
    body = json.dumps({"images": images, "model": "butd", "beam_size": 20}).encode()
    messages: list[dict[str, Any]] = []
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}  # gone as soon as the body is in

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    async def run() -> None:
        await app(_scope(body), receive, send)
        await asyncio.sleep(0.2)
        await runtime.engine.close()

    asyncio.run(run())
    start = next(m for m in messages if m["type"] == "http.response.start")
    assert start["status"] == 499
    assert decoded == [], "a gone caller's images were decoded"
    assert backend.calls == [], "a gone caller's images were encoded"
    assert runtime.engine.scheduler("butd").iterations == 0


def test_full_queue_answers_503_with_retry_after(tiny_repo: Path) -> None:
    import httpx

    manifest = load_manifest(tiny_repo)
    backend = SlowBackend(OnnxRuntimeBackend(tiny_repo, manifest, threads=1), step_delay_s=0.02)
    app = create_app(Settings(repo=tiny_repo, max_queue=1, max_active_requests=1), backend=backend)
    payload = {"images": [base64.b64encode(png(2)).decode()], "model": "butd", "beam_size": 2}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            responses = await asyncio.gather(*(client.post("/v1/captions", json=payload) for _ in range(4)))
            after = await client.post("/v1/captions", json=payload)
        await app.state.runtime.engine.close()
        return [*responses, after]

    *responses, after = asyncio.run(run())
    statuses = sorted(r.status_code for r in responses)
    assert 503 in statuses and 200 in statuses, statuses
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "overloaded"
    assert after.status_code == 200, "the gateway stopped serving after refusing requests"
