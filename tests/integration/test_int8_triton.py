"""The INT8 variants (``compcap quantize``) on a real local Triton (``.venv-triton``, python-backend
mirror): the server loads the ``<name>_int8`` directories beside the FP32 ones, each serves what the
embedded backend's INT8 session computes, and a gateway with ``COMPCAP_BACKEND=triton
COMPCAP_PRECISION=int8`` captions through them (the variants' Triton models count the calls). The
server is always stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from export.quantize import QuantizeResult
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.backends.precision import ServedNames
from service.backends.triton.backend import TritonBackend
from service.gateway.app import create_app
from service.metrics import Metrics
from service.settings import Settings
from service.tritonlocal.server import LocalTriton
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images
from tests.integration.conftest import local_triton, triton_successes
from tests.quantized import quantized_copy

pytestmark = pytest.mark.integration

VARIANTS = ["visual_encoder", "butr_step"]


@pytest.fixture(scope="module")
def quantized(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, QuantizeResult]:
    return quantized_copy(tiny_repo, tmp_path_factory.mktemp("int8"), models=VARIANTS)


@pytest.fixture(scope="module")
def triton(quantized: tuple[Path, QuantizeResult]) -> Iterator[LocalTriton]:
    with local_triton(quantized[0]) as server:
        yield server


def test_triton_serves_the_int8_directories(
    triton: LocalTriton, quantized: tuple[Path, QuantizeResult]
) -> None:
    repo, result = quantized
    assert {f"{m}_int8" for m in VARIANTS} <= set(triton.models)
    manifest = result.manifest
    local = OnnxRuntimeBackend(repo, manifest, threads=1, precision="int8")
    images = np.random.default_rng(0).integers(0, 256, (3, manifest.image.height, manifest.image.width, 3))

    async def compare() -> float:
        triton_backend = await TritonBackend.connect(triton.grpc_url, manifest, Metrics(), repo=repo)
        served = ServedNames(triton_backend, manifest.served_models("int8"), "int8")
        try:
            feed = {"image": images.astype(np.uint8)}
            a, b = await served.infer("visual_encoder", feed), await local.infer("visual_encoder", feed)
            return float(np.abs(a["regions"] - b["regions"]).max())
        finally:
            await served.close()
            await local.close()

    before = triton_successes(triton, "visual_encoder_int8")
    assert asyncio.run(compare()) <= 1e-4
    assert triton_successes(triton, "visual_encoder_int8") > before


def test_int8_gateway_on_triton(triton: LocalTriton, quantized: tuple[Path, QuantizeResult]) -> None:
    repo, _ = quantized
    settings = Settings(repo=repo, backend="triton", triton_url=triton.grpc_url, precision="int8")
    before = {m: triton_successes(triton, m) for m in ("butr_step", "butr_step_int8", "butr_init")}
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        assert isinstance(client.app.state.runtime.backend, ServedNames)  # type: ignore[attr-defined]
        response = post_images(client, png(3), model="butr", beam_size=3)
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["caption"]
    assert triton_successes(triton, "butr_step_int8") > before["butr_step_int8"]
    assert triton_successes(triton, "butr_step") == before["butr_step"], "the FP32 step was not called"
    assert triton_successes(triton, "butr_init") > before["butr_init"], (
        "a model without a variant serves FP32"
    )
