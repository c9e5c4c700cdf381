"""``compcap quantize --precision fp16``'s pure parts on the tiny repository: each precision's record
(thresholds, suffix, whether a slower variant is dropped), an FP16 variant keeps its FP32 model's
inputs and outputs, an FP16 variant timed on a CPU is kept however slow, a repository's INT8 set of
an earlier version loads unchanged and stays beside an FP16 set. No figure is pinned: FP16 kernels and
the tiny models' captions differ across CPUs."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from export.quantize import FP16, INT8, PRECISION, SPECS, QuantizeResult, report_lines, spec_for
from export.quantize.methods import check_contract, convert_fp16, io_contract, keep_declarations
from export.quantize.run import quantize_repo
from export.quantize.variants import make_variants, with_variants
from service.manifest import PRECISIONS, Manifest, PrecisionGate, PrecisionVariant, load_manifest
from tests.quantized import quantized_copy


def test_each_precision_has_its_record() -> None:
    assert set(SPECS) == {"int8", "fp16", "tf32"} and set(SPECS) <= set(PRECISIONS)
    assert (INT8.suffix, FP16.suffix) == ("_int8", "_fp16") and spec_for("fp16") is FP16
    assert (INT8.thresholds.cider_d_rel_change, INT8.thresholds.top1_agreement) == (0.02, 0.90)
    assert (FP16.thresholds.cider_d_rel_change, FP16.thresholds.top1_agreement) == (0.01, 0.95)
    assert INT8.thresholds.recall5_points == FP16.thresholds.recall5_points == 1.0
    assert FP16.with_thresholds(top1_agreement=0.5) == type(FP16.thresholds)(0.01, 0.5, 1.0)
    assert INT8.drops_slower("cpu") and not FP16.drops_slower("cpu") and FP16.drops_slower("cuda")
    assert FP16.cpu_level == "ORT_ENABLE_EXTENDED"  # an FP16 LSTM step crashes onnxruntime 1.31 at ALL
    assert any("BF16" in note for note in FP16.notes) and "GPU" in FP16.cpu_timing_note
    with pytest.raises(ValueError, match="precision must be one of"):
        spec_for("bf16")


def test_fp16_takes_no_int8_method(tiny_repo: Path) -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        quantize_repo(tiny_repo, method="static", precision="fp16")


def test_fp16_variants_keep_the_fp32_contract(tiny_repo: Path, tmp_path: Path) -> None:
    manifest = load_manifest(tiny_repo)
    for entry in manifest.models:
        out = tmp_path / entry.name / "model.onnx"
        convert_fp16(entry.path(tiny_repo), out)
        keep_declarations(entry.path(tiny_repo), out)
        check_contract(entry.path(tiny_repo), out)
        assert io_contract(out) == io_contract(entry.path(tiny_repo)), entry.name
        weights = {t.data_type for t in onnx.load(str(out)).graph.initializer}
        assert onnx.TensorProto.FLOAT16 in weights, f"{entry.name} has no FP16 weight"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(
        str(tmp_path / "visual_encoder" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    images = np.zeros((2, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)
    (regions,) = session.run(["regions"], {"image": images})
    assert regions.dtype == np.float32 and regions.shape[0] == 2 and np.isfinite(regions).all()
    narrowed = onnx.load(str(tmp_path / "butr_text" / "model.onnx"))
    narrowed.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    onnx.save(narrowed, str(tmp_path / "narrowed.onnx"))
    with pytest.raises(ValueError, match="outputs"):
        check_contract(manifest.model("butr_text").path(tiny_repo), tmp_path / "narrowed.onnx")


def _init_call(manifest: Manifest, rows: int = 4) -> dict[str, np.ndarray]:
    dims = manifest.model("butr_init").inputs[0].dims
    return {"regions": np.random.default_rng(0).standard_normal((rows, *dims)).astype(np.float32)}


def test_fp16_on_a_cpu_is_kept_however_slow_and_int8_is_not(tiny_repo: Path, tmp_path: Path) -> None:
    """No variant is a billion times faster: INT8 drops it, FP16 timed on the CPU keeps it (its time
    recorded with the device); no figure of the machine's speed is asserted."""
    repo = tmp_path / "model_repo"
    shutil.copytree(tiny_repo, repo)
    manifest = load_manifest(repo)
    calls = {"butr_init": [_init_call(manifest)]}
    kept = make_variants(repo, manifest, calls, ["butr_init"], "auto", 1e9, 1, FP16)
    assert kept.models == {"butr_init": "butr_init_fp16"} and kept.device == "cpu"
    assert set(kept.speed["butr_init"]) == {"fp32_ms", "fp16_ms", "speedup", "batch"}
    assert "avx512_fp16" in kept.machine
    assert (repo / "butr_init_fp16" / "config.pbtxt").is_file()
    dropped = make_variants(repo, manifest, calls, ["butr_init"], "auto", 1e9, 1, INT8)
    assert dropped.models == {} and "is not faster" in dropped.skipped["butr_init"]
    assert "int8_ms" in dropped.speed["butr_init"] and not (repo / "butr_init_int8").exists()


# an INT8 set as ``compcap quantize`` wrote it before FP16 existed (no ``device``, rows keyed int8)
OLD_INT8_SET: dict[str, Any] = {
    "models": {"butr_step": "butr_step_int8"},
    "methods": {"butr_step": "dynamic (LSTM)"},
    "skipped": {"visual_encoder": "rejected by the gate: butr: top-1 caption identical on 50.0% of images"},
    "speed": {"butr_step": {"fp32_ms": 1.5, "int8_ms": 1.25, "speedup": 1.2, "batch": 320.0}},
    "machine": "AMD EPYC, 2 cpus, avx2, no avx512_vnni",
    "gate": {
        "passed": False,
        "thresholds": {"cider_d_rel_change": 0.02, "top1_agreement": 0.9, "recall5_points": 1.0},
        "runs": {
            "butr": {
                "cider_d_fp32": 1.0195,
                "cider_d_int8": 1.0205,
                "cider_d_rel_change": 0.001,
                "top1_agreement": 0.906,
                "images": 500.0,
            }
        },
        "systematicity": {
            "butr": {
                "recall5_held_out_fp32": 0.0096,
                "recall5_held_out_int8": 0.0063,
                "recall5_held_out_delta_points": -0.33,
            }
        },
        "failures": ["butr: top-1 caption identical on 80.0% of images (< 90%)"],
        "notes": [],
    },
}


def test_an_old_int8_set_loads_unchanged_and_stays_beside_fp16(tiny_repo: Path) -> None:
    data = json.loads((tiny_repo / "manifest.json").read_text(encoding="utf-8"))
    data["precision_variants"] = {"int8": copy.deepcopy(OLD_INT8_SET)}
    manifest = Manifest.model_validate(data)
    int8 = manifest.precision_variants["int8"]
    assert int8.device == "cpu" and int8.model_dump(exclude={"device"}) == OLD_INT8_SET
    with pytest.raises(ValueError, match="failed its quality gate"):
        manifest.served_models("int8")
    printed = "\n".join(report_lines(QuantizeResult(int8, manifest)))
    assert PRECISION == "int8" and "1.0195 -> 1.0205" in printed and "0.96 -> 0.63" in printed
    assert "1.500 -> 1.250 ms" in printed and "gate: failed" in printed

    fp16 = PrecisionVariant(models={"butr_step": "butr_step_fp16"}, machine="m")
    both = with_variants(manifest, fp16, PrecisionGate(passed=True), "fp16")
    assert both.precision_variants["int8"] == int8, "an FP16 run leaves the INT8 set as it was"
    assert both.served_models("fp16")["butr_step"] == "butr_step_fp16"
    assert both.model("butr_step_fp16").role == "captioner_step"
    again = with_variants(both, fp16.model_copy(update={"models": {}}), PrecisionGate(passed=False), "fp16")
    assert "butr_step_fp16" not in {m.name for m in again.models}, "a new FP16 set replaces the old"
    assert again.precision_variants["int8"] == int8


def test_the_local_triton_loads_fp16_variants_at_extended() -> None:
    """The python-backend stand-in imports nothing of the project (it runs in Triton's stub): its
    suffix is FP16's (tests/integration/test_fp16.py serves the FP16 steps through it)."""
    source = (Path(__file__).parents[3] / "service/tritonlocal/python_model.py").read_text(encoding="utf-8")
    assert f'FP16_SUFFIX = "{FP16.suffix}"' in source and "ORT_ENABLE_EXTENDED" in source


def test_an_fp16_variant_failing_its_gate_is_refused_with_the_reason(tiny_repo: Path, tmp_path: Path) -> None:
    impossible = FP16.with_thresholds(top1_agreement=1.01)
    repo, result = quantized_copy(
        tiny_repo, tmp_path, precision="fp16", thresholds=impossible, models=["butr_step"]
    )
    entry = load_manifest(repo).precision_variants["fp16"]
    assert result.precision == "fp16" and not entry.passed and entry.models == {}
    assert "rejected by the gate" in entry.skipped["butr_step"] and "top-1" in entry.skipped["butr_step"]
    assert not (repo / "butr_step_fp16").exists()
    assert entry.gate is not None and "no FP16 variant passed the gate" in entry.gate.failures
    printed = "\n".join(report_lines(result))
    assert "gate: failed: not served" in printed and "says nothing about a GPU" in printed
    with pytest.raises(ValueError, match=r"COMPCAP_PRECISION=fp16: .*failed its quality gate"):
        result.manifest.served_models("fp16")
