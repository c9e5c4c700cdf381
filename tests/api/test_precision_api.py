"""A gateway with ``COMPCAP_PRECISION=int8`` on the tiny repository's INT8 variants (``compcap
quantize``) captions through the variants' files; on a repository without passed variants the setting
is refused at start-up, naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from export.quantize import PRECISION, QuantizeResult
from service.cli.errors import UsageError
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings, load_settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images
from tests.quantized import quantized_copy


@pytest.fixture(scope="module")
def quantized(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, QuantizeResult]:
    return quantized_copy(tiny_repo, tmp_path_factory.mktemp("int8"), models=["visual_encoder", "butr_step"])


@pytest.fixture(scope="module")
def int8_client(quantized: tuple[Path, QuantizeResult]) -> Iterator[TestClient]:
    repo, _ = quantized
    app = create_app(Settings(repo=repo, precision="int8", intra_op_threads=1))
    with TestClient(app) as client:
        wait_ready(client)
        yield client


def test_int8_gateway_captions_through_the_int8_files(
    int8_client: TestClient, quantized: tuple[Path, QuantizeResult]
) -> None:
    repo, result = quantized
    assert result.variant.passed and set(result.variant.models) == {"visual_encoder", "butr_step"}
    response = post_images(int8_client, png(1), png(2), model="butr", rerank="butr")
    assert response.status_code == 200, response.text
    assert all(r["caption"] for r in response.json()["results"])
    backend = int8_client.app.state.runtime.backend  # type: ignore[attr-defined]
    assert backend.precision == PRECISION
    assert backend.paths["visual_encoder"] == repo / "visual_encoder_int8" / "1" / "model.onnx"
    assert backend.paths["butr_step"] == repo / "butr_step_int8" / "1" / "model.onnx"
    assert backend.paths["butr_init"] == repo / "butr_init" / "1" / "model.onnx", "no variant: FP32"
    models = int8_client.get("/v1/models").json()
    listed = models["captioners"]
    assert [c["name"] for c in listed] == ["butr", "butd"], "variants are models, not captioners"
    assert models["precision"] == "int8"
    assert models["quantized_models"] == ["butr_step", "visual_encoder"]


def test_int8_without_passed_variants_is_a_settings_error(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if load_manifest(tiny_repo).precision_variants.get(PRECISION) is not None:
        pytest.skip("this tiny repository was quantized")
    monkeypatch.setenv("COMPCAP_PRECISION", "int8")
    with pytest.raises(UsageError, match=r"precision: .*COMPCAP_PRECISION=int8.*compcap quantize"):
        load_settings(repo=tiny_repo)
