"""TF32 as a precision admitted through the gate: it exists only on CUDA, so ``compcap quantize
--precision tf32`` refuses where the gate would decode on the CPU (this machine), before any work; its
variants are copies of the FP32 files (the backend opens them with ``use_tf32=1``). That the CUDA
provider then computes in TF32 is the GPU check's to see (no GPU here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from export.quantize import quantize_repo, spec_for
from export.quantize.precisions import VariantJob
from export.quantize.run import gate_device


def test_tf32_is_made_and_gated_only_on_cuda(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_for("tf32")
    assert spec.only_on == "cuda" and spec.thresholds == spec_for("fp16").thresholds
    monkeypatch.setenv("COMPCAP_DEVICE", "cpu")
    assert gate_device("cpu") == "cpu"
    before = sorted(p.name for p in tiny_repo.iterdir())
    refusal = r"--precision tf32: TF32 exists only on CUDA.*run it on the GPU host"
    with pytest.raises(ValueError, match=refusal):
        quantize_repo(tiny_repo, precision="tf32")
    assert sorted(p.name for p in tiny_repo.iterdir()) == before, "refused before writing anything"


def test_a_tf32_variant_is_the_fp32_file(tmp_path: Path) -> None:
    source, out = tmp_path / "model.onnx", tmp_path / "variant.onnx"
    source.write_bytes(b"onnx bytes")
    spec_for("tf32").make(VariantJob(None, source, out, "auto", [], tmp_path))  # type: ignore[arg-type]
    assert out.read_bytes() == source.read_bytes()
