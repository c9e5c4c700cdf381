"""A new backend is one registered record (``service.backends.registry``): this module defines one —
``recording``, the null backend's outputs with every call written down — registers it, serves the
gateway with ``COMPCAP_BACKEND=recording`` (read from the environment, as ``compcap serve`` reads it),
captions through it and unregisters it, after which the same setting is refused naming the known
backends. Nothing else of the code base names it: its module, its test and its line in the docs are the
whole of a backend (one with third-party packages also needs its extra and lock lines)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.backends.base import Backend
from service.backends.null import NullBackend
from service.backends.registry import BackendRecord, backend_names, register, unregister
from service.gateway.app import create_app
from service.manifest import Manifest
from service.metrics import Metrics
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images


class RecordingBackend:
    """The null backend's answers, each call's model name kept in ``calls``."""

    def __init__(self, manifest: Manifest, metrics: Metrics) -> None:
        self.inner = NullBackend(manifest, metrics)
        self.devices = self.inner.devices
        self.calls: list[str] = []

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, Any]:
        self.calls.append(model)
        return await self.inner.infer(model, inputs, outputs)

    async def close(self) -> None:
        await self.inner.close()


BUILT: list[RecordingBackend] = []


async def build(settings: Any, manifest: Manifest, metrics: Metrics) -> Backend:
    backend = RecordingBackend(manifest, metrics)
    BUILT.append(backend)
    return backend


RECORD = BackendRecord("recording", "the null backend's outputs, every call written down", build)


@pytest.fixture
def registered() -> Iterator[BackendRecord]:
    register(RECORD)
    try:
        yield RECORD
    finally:
        unregister(RECORD.name)


def test_a_backend_registered_here_serves_captions(
    registered: BackendRecord, tiny_repo: Path, manifest: Manifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPCAP_BACKEND", "recording")
    settings = Settings(repo=tiny_repo, state_url="")
    assert settings.backend == "recording" and "recording" in backend_names()
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        response = post_images(client, png(1), beam_size=2)
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["captions"]
        assert set(client.get("/v1/models").json()["devices"].values()) == {"none"}
    calls: Mapping[str, int] = {m: BUILT[-1].calls.count(m) for m in set(BUILT[-1].calls)}
    cap = manifest.captioner(manifest.default_captioner)
    assert calls.get(cap.init, 0) >= 1 and calls.get(cap.step, 0) >= 1, calls  # the decode went through it


def test_an_unregistered_backend_is_refused_naming_the_setting_and_the_known(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPCAP_BACKEND", "recording")
    with pytest.raises(ValidationError) as caught:
        Settings(repo=tiny_repo)
    message = str(caught.value)
    assert "COMPCAP_BACKEND: unknown backend 'recording'" in message
    # the backends servable here: triton where its client package is installed (not in the serve-only venvs)
    triton = ", triton" if importlib.util.find_spec("tritonclient") is not None else ""
    assert f"backends: null, onnxruntime{triton}" in message
