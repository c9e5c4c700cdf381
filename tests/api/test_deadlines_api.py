"""A caption request's deadline per captioner (``service.engine.deadlines``): where
``COMPCAP_REQUEST_DEADLINE_S`` is unset, a captioner whose import measured its single caption waits 30
times that (when longer than the base) and the others the base; set, it holds for every captioner; a 504
says which deadline it was and which setting raises it; the gauge exports each captioner's. The base is
lowered here so that the test waits a second, not ten."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import service.engine.deadlines as deadlines
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images

BASE_S = 0.3
SINGLE_CAPTION_MS = 200.0  # butr's: a deadline of 30 x 0.2 = 6 s
DELAY_S = 1.0  # every encoder call waits this long: past the base, well within butr's 6 s


class DelayedEncoder:
    """The real backend, every call to an ``*_init`` model delayed ``DELAY_S``."""

    def __init__(self, backend: OnnxRuntimeBackend) -> None:
        self.backend = backend

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        keep: Sequence[str] = (),
    ) -> dict[str, np.ndarray]:
        if model.endswith("_init"):
            await asyncio.sleep(DELAY_S)
        return await self.backend.infer(model, inputs, outputs, keep)

    async def close(self) -> None:
        await self.backend.close()


@pytest.fixture()
def repo(tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny repository with butr's single caption recorded as an import would; the base lowered."""
    out = tmp_path / "model_repo"
    shutil.copytree(tiny_repo, out)
    path = out / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for captioner in manifest["captioners"]:
        if captioner["name"] == "butr":
            captioner["single_caption_ms"] = SINGLE_CAPTION_MS
    path.write_text(json.dumps(manifest), encoding="utf-8")
    monkeypatch.setattr(deadlines, "BASE_DEADLINE_S", BASE_S)
    return out


def _client(repo: Path, **settings: Any) -> TestClient:
    backend = DelayedEncoder(OnnxRuntimeBackend(repo, load_manifest(repo), threads=1))
    return TestClient(create_app(Settings(repo=repo, **settings), backend=backend))  # type: ignore[arg-type]


def test_a_captioner_measured_at_import_waits_longer(repo: Path) -> None:
    with _client(repo) as client:
        wait_ready(client)
        slow = post_images(client, png(1), model="butr", rerank="none")
        assert slow.status_code == 200, slow.text  # 1 s: past the base, within its own 6 s
        cut = post_images(client, png(2), model="butd", rerank="none")
        assert cut.status_code == 504
        message = cut.json()["error"]["message"]
        assert f"longer than {BASE_S:g} s" in message and "set COMPCAP_REQUEST_DEADLINE_S" in message
        metrics = client.get("/metrics").text
    assert f'compcap_request_deadline_seconds{{model="butr"}} {30 * SINGLE_CAPTION_MS / 1e3}' in metrics
    assert f'compcap_request_deadline_seconds{{model="butd"}} {BASE_S}' in metrics


def test_the_setting_holds_for_every_captioner(repo: Path) -> None:
    with _client(repo, request_deadline_s=0.4) as client:
        wait_ready(client)
        response = post_images(client, png(1), model="butr", rerank="none")
        assert response.status_code == 504
        assert "longer than 0.4 s (COMPCAP_REQUEST_DEADLINE_S=0.4)" in response.json()["error"]["message"]
        assert 'compcap_request_deadline_seconds{model="butr"} 0.4' in client.get("/metrics").text
