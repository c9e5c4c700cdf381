"""``compcap quantize --precision fp16`` on a copy of the tiny repository that already has an INT8 set,
then ``COMPCAP_PRECISION=fp16`` served on both backends: the embedded one (each FP16 variant's file
loaded under its FP32 model's name) and a real local Triton (``.venv-triton``), whose python-backend
stand-in loads the ``_fp16`` models at ``ORT_ENABLE_EXTENDED`` (onnxruntime 1.31's CPU provider crashes
creating an FP16 LSTM step at ``ORT_ENABLE_ALL``: the step's model would not load). The INT8 set stays
served beside it. The gate is opened (the tiny models' captions move with any perturbation): no figure
of FP16 arithmetic or of the machine's speed is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from export.quantize import FP16
from service import cli
from service.backends.precision import ServedNames
from service.gateway.app import create_app
from service.manifest import Manifest, load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.api.test_captions_api import png, post_images
from tests.integration.conftest import local_triton, triton_successes
from tests.quantized import quantized_copy

pytestmark = pytest.mark.integration

VARIANTS = ["visual_encoder", "butr_step", "butd_step"]


@pytest.fixture(scope="module")
def fp16_repo(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny repository with an INT8 set (butr_init), then ``compcap quantize --precision fp16``."""
    out = tmp_path_factory.mktemp("fp16")
    repo, _ = quantized_copy(tiny_repo, out, models=["butr_init"])
    report = out / "fp16.json"
    argv = ["quantize", "--repo", str(repo), "--precision", "fp16", "--models", *VARIANTS]
    argv += ["--calibration-images", "4", "--eval-images", "4", "--no-systematicity"]
    argv += ["--min-top1", "0", "--max-cider-change", "1e9", "--json", str(report)]
    assert cli.main(argv) == 0
    assert json.loads(report.read_text(encoding="utf-8"))["models"] == {m: m + "_fp16" for m in VARIANTS}
    return repo


def test_the_fp16_set_is_recorded_beside_the_int8_set(fp16_repo: Path) -> None:
    manifest = load_manifest(fp16_repo)
    fp16, int8 = manifest.precision_variants["fp16"], manifest.precision_variants["int8"]
    assert fp16.passed and int8.passed and int8.models == {"butr_init": "butr_init_int8"}
    assert fp16.device == "cpu" and all(fp16.speed[m]["fp16_ms"] > 0 for m in VARIANTS)
    assert fp16.gate is not None and fp16.gate.thresholds == {
        "cider_d_rel_change": 1e9,
        "top1_agreement": 0.0,
        "recall5_points": FP16.thresholds.recall5_points,  # not given: FP16's own
    }
    assert any("says nothing about a GPU" in note for note in fp16.gate.notes)
    assert manifest.served_models("int8")["butr_init"] == "butr_init_int8"
    assert manifest.served_models("fp16") == {
        name: name + "_fp16" if name in VARIANTS else name for name in manifest.served_models("fp32")
    }
    for name in VARIANTS:
        assert (fp16_repo / f"{name}_fp16" / "1" / "model.onnx").is_file()


def _caption(settings: Settings) -> TestClient:
    client = TestClient(create_app(settings))
    client.__enter__()
    wait_ready(client)
    for model, rerank in (("butr", "butr"), ("butd", "vsepp")):
        response = post_images(client, png(1), png(2), model=model, rerank=rerank, beam_size=3)
        assert response.status_code == 200, response.text
        assert all(r["caption"] for r in response.json()["results"])
    return client


def test_fp16_gateway_on_the_embedded_backend(fp16_repo: Path) -> None:
    client = _caption(Settings(repo=fp16_repo, precision="fp16", intra_op_threads=1))
    try:
        backend = client.app.state.runtime.backend  # type: ignore[attr-defined]
        assert backend.precision == "fp16"
        for name in VARIANTS:
            assert backend.paths[name] == fp16_repo / f"{name}_fp16" / "1" / "model.onnx"
        assert backend.paths["butr_init"] == fp16_repo / "butr_init" / "1" / "model.onnx"
        listing = client.get("/v1/models").json()
        assert listing["precision"] == "fp16" and listing["quantized_models"] == sorted(VARIANTS)
    finally:
        client.__exit__(None, None, None)


def test_fp16_gateway_on_triton(fp16_repo: Path) -> None:
    manifest: Manifest = load_manifest(fp16_repo)
    with local_triton(fp16_repo) as triton:
        assert {f"{m}_fp16" for m in VARIANTS} | {"butr_init_int8"} <= set(triton.models)
        before = {m: triton_successes(triton, m) for m in ("butr_step", "butr_step_fp16", "butd_step_fp16")}
        settings = Settings(repo=fp16_repo, backend="triton", triton_url=triton.grpc_url, precision="fp16")
        client = _caption(settings)
        try:
            backend = client.app.state.runtime.backend  # type: ignore[attr-defined]
            assert isinstance(backend, ServedNames) and backend.served == manifest.served_models("fp16")
        finally:
            client.__exit__(None, None, None)
        assert triton_successes(triton, "butr_step_fp16") > before["butr_step_fp16"]
        assert triton_successes(triton, "butd_step_fp16") > before["butd_step_fp16"]
        assert triton_successes(triton, "butr_step") == before["butr_step"], "the FP32 step was not called"
