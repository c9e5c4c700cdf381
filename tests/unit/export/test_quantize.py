"""``compcap quantize`` on the tiny repository: INT8 variants written as Triton models of their own,
listed in the manifest beside the FP32 models, served by the embedded backend at
``COMPCAP_PRECISION=int8``; a variant set that fails its gate is recorded as failed and never served.
No figure is pinned: the tiny models' captions, and INT8 kernels, differ across CPUs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from pydantic import ValidationError

from export.packaging.triton_repo import parse_config
from export.quantize import PRECISION, QuantizeResult, Thresholds, recipe
from export.quantize.stale import drop_owner_variants, stale_variants
from service import cli
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.backends.precision import ServedNames
from service.backends.triton.addresses import DIGEST_PARAMETER, file_sha256
from service.engine.settings import EngineSettings
from service.manifest import Manifest, load_manifest
from tests.quantized import quantized_copy

QUANTIZED_OPS = {
    "DynamicQuantizeLSTM",
    "DynamicQuantizeMatMul",
    "MatMulInteger",
    "DynamicQuantizeLinear",
    "QuantizeLinear",
    "DequantizeLinear",
}

CPU = ["CPUExecutionProvider"]  # explicit: onnxruntime's GPU build requires providers


@pytest.fixture(scope="module")
def quantized(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, QuantizeResult]:
    return quantized_copy(tiny_repo, tmp_path_factory.mktemp("int8"))


def test_variants_are_triton_models_beside_the_fp32_ones(quantized: tuple[Path, QuantizeResult]) -> None:
    repo, result = quantized
    variants = result.variant.models
    assert "visual_encoder" in variants and any(n.endswith("_step") for n in variants)
    for source, variant in variants.items():
        assert variant == f"{source}_int8"
        fp32 = parse_config((repo / source / "config.pbtxt").read_text(encoding="utf-8"))
        config = parse_config((repo / variant / "config.pbtxt").read_text(encoding="utf-8"))
        assert config.name == variant and config.platform == "onnxruntime_onnx"
        config.name = fp32.name
        if DIGEST_PARAMETER in fp32.parameters:  # the variant's own file's, which Triton servers publish
            digest = config.parameters[DIGEST_PARAMETER].string_value
            assert digest == file_sha256(repo / variant / "1" / "model.onnx")
            config.parameters[DIGEST_PARAMETER].string_value = fp32.parameters[DIGEST_PARAMETER].string_value
        assert config == fp32, f"{variant}: the FP32 config but for its name"
        graph = onnx.load(str(repo / variant / "1" / "model.onnx")).graph
        assert QUANTIZED_OPS & {n.op_type for n in graph.node}, f"{variant} has no INT8 op"
        session = ort.InferenceSession(str(repo / variant / "1" / "model.onnx"), providers=CPU)
        fp32_session = ort.InferenceSession(str(repo / source / "1" / "model.onnx"), providers=CPU)
        assert [(i.name, i.type) for i in session.get_inputs()] == [
            (i.name, i.type) for i in fp32_session.get_inputs()
        ]


def test_the_manifest_lists_passed_variants(quantized: tuple[Path, QuantizeResult]) -> None:
    repo, result = quantized
    manifest = load_manifest(repo)
    assert manifest == result.manifest
    entry = manifest.precision_variants[PRECISION]
    assert entry.passed and entry.gate is not None and not entry.gate.failures
    assert set(entry.methods) == set(entry.models) and entry.machine
    assert set(entry.models) | set(entry.skipped) == {m.name for m in manifest.models} - set(
        entry.models.values()
    )
    for source, variant in entry.models.items():
        a, b = manifest.model(source), manifest.model(variant)
        assert (b.role, b.inputs, b.outputs, b.max_batch_size) == (
            a.role,
            a.inputs,
            a.outputs,
            a.max_batch_size,
        )
        assert entry.speed[source]["fp32_ms"] > 0 and entry.speed[source]["int8_ms"] > 0
    served = manifest.served_models(PRECISION)
    assert served == {m: entry.models.get(m, m) for m in manifest.served_models("fp32")}
    assert set(served) == {c.init for c in manifest.captioners} | {c.step for c in manifest.captioners} | {
        "visual_encoder",
        *(r.image for r in manifest.rankers),
        *(r.text for r in manifest.rankers),
    }
    runs = {"butr", "butr+butr", "butd", "butd+vsepp"}
    assert set(entry.gate.runs) == runs
    for row in entry.gate.runs.values():
        assert 0.0 <= row["top1_agreement"] <= 1.0 and row["images"] == 6
        assert row["cider_d_fp32"] >= 0 and row["cider_d_int8"] >= 0
    assert any("systematicity not measured" in note for note in entry.gate.notes)


def test_an_old_manifest_still_loads(tiny_repo: Path) -> None:
    data = json.loads((tiny_repo / "manifest.json").read_text(encoding="utf-8"))
    data.pop("precision_variants", None)
    manifest = Manifest.model_validate(data)
    assert manifest.precision_variants == {}
    with pytest.raises(ValueError, match="COMPCAP_PRECISION=int8"):
        manifest.served_models("int8")


def test_the_embedded_backend_runs_the_int8_files(quantized: tuple[Path, QuantizeResult]) -> None:
    repo, result = quantized
    manifest = result.manifest
    variants = result.variant.models
    int8 = OnnxRuntimeBackend(repo, manifest, threads=1, precision="int8")
    fp32 = OnnxRuntimeBackend(repo, manifest, threads=1)
    try:
        assert set(int8.sessions) == set(fp32.sessions) == set(manifest.served_models("fp32"))
        for name in fp32.sessions:
            assert fp32.paths[name] == repo / name / "1" / "model.onnx"
            assert int8.paths[name] == repo / variants.get(name, name) / "1" / "model.onnx"
        images = np.zeros((2, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)
        out = asyncio.run(int8.infer("visual_encoder", {"image": images}))
        assert out["regions"].shape[0] == 2 and np.isfinite(out["regions"]).all()
    finally:
        asyncio.run(int8.close())
        asyncio.run(fp32.close())


def test_settings_take_int8_only_where_it_passed(
    quantized: tuple[Path, QuantizeResult], tiny_repo: Path
) -> None:
    repo, _ = quantized
    assert EngineSettings(repo=repo, precision="int8").precision == "int8"
    if load_manifest(tiny_repo).precision_variants.get(PRECISION) is None:
        with pytest.raises(ValidationError, match=r"(?s)precision.*COMPCAP_PRECISION=int8"):
            EngineSettings(repo=tiny_repo, precision="int8")
    with pytest.raises(ValidationError, match="precision"):
        EngineSettings(repo=repo, precision="int4")  # type: ignore[arg-type]


def test_a_failing_gate_keeps_the_variants_from_being_served(tiny_repo: Path, tmp_path: Path) -> None:
    impossible = Thresholds(cider_d_rel_change=1e9, top1_agreement=1.01, recall5_points=1e9)
    repo, result = quantized_copy(tiny_repo, tmp_path, thresholds=impossible, models=["butr_step"])
    entry = load_manifest(repo).precision_variants[PRECISION]
    assert not entry.passed and entry.models == {}
    assert "rejected by the gate" in entry.skipped["butr_step"] and "top-1" in entry.skipped["butr_step"]
    assert not (repo / "butr_step_int8").exists()
    assert all(not m.name.endswith("_int8") for m in result.manifest.models)
    with pytest.raises(ValueError, match="failed its quality gate"):
        result.manifest.served_models(PRECISION)
    with pytest.raises(ValidationError, match="COMPCAP_PRECISION=int8"):
        EngineSettings(repo=repo, precision="int8")


def test_a_set_failing_systematicity_is_recorded_and_not_served(tiny_repo: Path, tmp_path: Path) -> None:
    """The probe's figures are measured and the set fails them on purpose (no change is within -1
    point): its variants stay on disk, recorded as failed, and are not models of the repository."""
    strict = Thresholds(cider_d_rel_change=1e9, top1_agreement=0.0, recall5_points=-1.0)
    repo, result = quantized_copy(
        tiny_repo, tmp_path, thresholds=strict, systematicity=True, models=["butr_step", "butr_init"]
    )
    entry = result.variant
    assert not entry.passed and entry.gate is not None
    assert set(entry.models) == {"butr_step", "butr_init"}
    assert set(entry.gate.systematicity) == {"butr", "butr+butr", "butd"}
    for row in entry.gate.systematicity.values():
        assert {"recall5_held_out_fp32", "recall5_held_out_int8", "recall5_held_out_delta_points"} <= set(row)
    assert any("systematicity mean Recall@5" in f for f in entry.gate.failures)
    manifest = load_manifest(repo)
    assert {m.name for m in manifest.models}.isdisjoint(entry.models.values())
    assert all((repo / v / "1" / "model.onnx").is_file() for v in entry.models.values())
    with pytest.raises(ValueError, match="failed its quality gate"):
        manifest.served_models(PRECISION)


def test_variants_must_be_consistent_with_their_gate(quantized: tuple[Path, QuantizeResult]) -> None:
    _, result = quantized
    data = result.manifest.model_dump()
    failed = json.loads(json.dumps(data))
    failed["precision_variants"][PRECISION]["gate"]["passed"] = False
    with pytest.raises(ValidationError, match="failed its gate"):
        Manifest.model_validate(failed)  # a failed variant listed as a model
    missing = json.loads(json.dumps(data))
    missing["models"] = [m for m in missing["models"] if not m["name"].endswith("_int8")]
    with pytest.raises(ValidationError, match="must be a"):
        Manifest.model_validate(missing)  # a passed variant that is not a model
    unknown = json.loads(json.dumps(data))
    unknown["precision_variants"]["int4"] = unknown["precision_variants"].pop(PRECISION)
    with pytest.raises(ValidationError, match="int4"):
        Manifest.model_validate(unknown)


def test_a_changed_owner_leaves_the_variant_sets(quantized: tuple[Path, QuantizeResult]) -> None:
    """butd imported again (``drop_owner_variants``, as ``compcap import hf`` calls it): its variants
    leave the set, its models are skipped with the reason, the gate's runs through butd are dropped with
    a note, and the rest of the set (and its verdict) stands; the result is a valid manifest."""
    _, result = quantized
    manifest = result.manifest
    own = [m.name for m in manifest.models if m.owner == "butd" and not m.name.endswith("_int8")]
    stale = stale_variants(manifest, "butd")
    assert stale and all(name.startswith("butd_") and name.endswith("_int8") for name in stale)
    sets = drop_owner_variants(manifest, "butd", own)
    int8 = sets[PRECISION]
    assert not set(int8["models"]) & set(own) and set(int8["models"]) == set(result.variant.models) - set(own)
    assert all("butd was imported after the variants" in int8["skipped"][name] for name in own)
    assert not [run for run in int8["gate"]["runs"] if "butd" in run.split("+")]
    assert any("earlier butd" in note for note in int8["gate"]["notes"])
    assert int8["gate"]["passed"] == result.variant.gate.passed  # type: ignore[union-attr]
    data = manifest.model_dump()
    data["models"] = [m for m in data["models"] if m["name"] not in stale]
    again = Manifest.model_validate({**data, "precision_variants": sets})
    assert again.served_models(PRECISION)["butd_step"] == "butd_step"
    assert again.served_models(PRECISION)["butr_step"] == result.variant.models["butr_step"]
    assert drop_owner_variants(Manifest.model_validate({**data, "precision_variants": {}}), "butd", own) == {}


def test_recipes() -> None:
    assert recipe("visual_encoder", {"Conv", "Relu"}, "auto").method == "static"
    assert recipe("captioner_step", {"LSTM", "MatMul", "Gemm"}, "auto").ops == ("LSTM",)
    assert recipe("captioner_step", {"MatMul", "Softmax"}, "auto").ops == ("MatMul", "Gemm")
    assert recipe("ranker_text", {"GRU", "Gemm"}, "auto").ops == ("MatMul", "Gemm", "GRU")
    assert recipe("captioner_step", {"LSTM"}, "static").ops == ("Conv", "MatMul", "Gemm", "LSTM")
    assert "dynamic LSTM" in recipe("captioner_step", {"LSTM"}, "static").describe()
    with pytest.raises(ValueError, match="method"):
        recipe("captioner_step", set(), "fp16")


def test_served_names_calls_the_variant() -> None:
    calls: list[str] = []

    class Inner:
        async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            calls.append(model)
            return {}

        async def close(self) -> None:
            calls.append("closed")

    backend = ServedNames(Inner(), {"butr_step": "butr_step_int8"}, "int8")
    asyncio.run(backend.infer("butr_step", {}))
    asyncio.run(backend.infer("visual_encoder", {}))
    asyncio.run(backend.close())
    assert calls == ["butr_step_int8", "visual_encoder", "closed"]


def test_the_command(tiny_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo, _ = quantized_copy(tiny_repo, tmp_path, models=["butd_init"])
    out = tmp_path / "int8.json"
    code = cli.main(
        [
            "quantize",
            "--repo",
            str(repo),
            "--models",
            "butr_init",
            "--calibration-images",
            "4",
            "--eval-images",
            "4",
            "--no-systematicity",
            "--min-speedup",
            "0",
            "--min-top1",
            "0",
            "--max-cider-change",
            "1e9",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "butr_init -> butr_init_int8" in printed and "gate: passed" in printed
    assert json.loads(out.read_text(encoding="utf-8"))["models"] == {"butr_init": "butr_init_int8"}
    manifest = load_manifest(repo)
    assert manifest.precision_variants[PRECISION].models == {"butr_init": "butr_init_int8"}
    assert not (repo / "butd_init_int8").exists(), "a run replaces the earlier variants"
    assert cli.main(["quantize", "--repo", str(repo), "--models", "nope"]) == 2


def test_recording_keeps_within_its_budget_the_largest_calls() -> None:
    """Calls of 1, 2, 3 and 1 KB with a 4 KB budget: the first two fit, the third takes the place of the
    smallest, the last (no larger than any kept) is dropped; every call still reaches the backend."""
    import asyncio

    import numpy as np

    from export.quantize.common import RecordingBackend

    class Answering:
        def __init__(self) -> None:
            self.calls = 0

        async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            self.calls += 1
            return {}

    inner = Answering()
    recorder = RecordingBackend(inner, limit=10, budget=4096)  # type: ignore[arg-type]
    for kb in (1, 2, 3, 1):
        asyncio.run(recorder.infer("m", {"x": np.zeros(kb * 256, dtype=np.float32)}))
    assert sorted(c["x"].nbytes // 1024 for c in recorder.calls["m"]) == [2, 3]
    assert inner.calls == 4 and recorder.seen["m"] == 4


def test_the_gate_holds_its_step_calls_to_a_state_budget(tiny_repo: Path) -> None:
    """A real-size kv state (1.5 MB a row) caps the gate's step calls far below the engine's 512 rows;
    light states keep the engine's cap; a re-ranked run's beam always fits."""
    from export.quantize.common import GATE_STATE_BYTES, RERANK_BEAM, engine_settings, gate_rows

    manifest = load_manifest(tiny_repo)
    light = engine_settings(tiny_repo, manifest)
    assert light.max_rows_per_step == engine_settings(tiny_repo).max_rows_per_step == 512
    caps = [c.model_copy(update={"state_dim": 12 * 2 * 12 * 20 * 64}) for c in manifest.captioners]
    heavy = manifest.model_copy(update={"captioners": caps})
    rows = gate_rows(heavy)
    assert rows == GATE_STATE_BYTES // (8 * 368_640) == 182
    assert engine_settings(tiny_repo, heavy).max_rows_per_step == rows
    huge = [c.model_copy(update={"state_dim": 10**8}) for c in manifest.captioners]
    assert gate_rows(manifest.model_copy(update={"captioners": huge})) == RERANK_BEAM
