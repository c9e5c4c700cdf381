"""What differs between the precisions ``compcap quantize --precision`` writes: one record each (its
suffix, how a variant is made, the gate's thresholds, whether a variant not faster is dropped). Every
other step (calibration, timing, the gate, the manifest) is the same for all of them.

- ``int8`` (the default): a CPU precision. INT8 kernels pay where the CPU has them (VNNI), so a variant
  not faster than its FP32 model on this CPU is dropped. Gate: CIDEr-D within 2% relative, top-1
  agreement >= 90%, systematicity Recall@5 within 1 point.
- ``fp16``: a GPU precision (tensor cores). ``convert_float_to_float16`` with FP32 inputs and outputs;
  on a CPU it is no faster than FP32, often slower (onnxruntime casts around the CPU kernels that have
  no FP16 version; 0.82-1.06x on the default repository), so its CPU timing is recorded with the
  device but drops nothing: it says nothing about a GPU. Gate: CIDEr-D within 1% relative, top-1
  agreement >= 95%, Recall@5 within 1 point. Sessions on the CPU provider load it at
  ``ORT_ENABLE_EXTENDED``: onnxruntime 1.31's CPU provider crashes (SIGSEGV) creating an FP16 LSTM step
  at ``ORT_ENABLE_ALL``.
- ``tf32``: FP32 models whose matrix products the CUDA provider may compute in TF32 (its default, off
  in CompCap: on an H200 it changed 20 of 183 pinned captions). The variant is a copy of the FP32 file;
  the embedded backend opens it with ``use_tf32=1``. TF32 exists only on CUDA, so its variants are made
  and gated only where the gate decodes on CUDA (``COMPCAP_DEVICE=cuda``, or auto on a GPU host):
  elsewhere ``compcap quantize --precision tf32`` refuses, naming why. Gate: as FP16's. On Triton, TF32
  is the server's (``NVIDIA_TF32_OVERRIDE`` in its environment), not a model's: its tf32 models compute
  as their FP32 ones under the overlays' override.
- BF16 is not built: onnxruntime's CUDA provider has only partial BF16 kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from export.quantize.common import Thresholds
from export.quantize.methods import FP16_METHOD, convert_fp16, graph_ops, quantize_model, recipe
from service.manifest import ModelEntry


@dataclass(frozen=True)
class VariantJob:
    """One variant to make: its FP32 model's ``entry`` and file (``source``), the variant's file
    (``out``), ``--method``, the ``calls`` recorded for the model, and a ``work`` folder."""

    entry: ModelEntry
    source: Path
    out: Path
    method: str
    calls: Sequence[dict[str, np.ndarray]]
    work: Path


Make = Callable[[VariantJob], None]


@dataclass(frozen=True)
class PrecisionSpec:
    """One precision ``compcap quantize`` writes variants at."""

    name: str  # the manifest's precision_variants key, COMPCAP_PRECISION's value
    thresholds: Thresholds  # the gate's defaults
    methods: tuple[str, ...]  # the --method values it takes (the first is the default)
    describe: Callable[[ModelEntry, Path, str], str]  # how the variant of (entry, file, method) is made
    make: Make
    drops_slower_on: frozenset[str]  # devices whose timing drops a variant not faster than FP32
    cpu_level: str  # onnxruntime GraphOptimizationLevel of a CPU session that loads a variant
    cpu_feature: str  # the CPU flag that says whether this CPU computes it natively (``machine``)
    cpu_timing_note: str = ""  # what its timing on a CPU does not say (a gate note where timed there)
    notes: tuple[str, ...] = ()  # what else the report says of it (in the gate's notes)
    only_on: str | None = None  # the device the gate must decode on for the variants to mean anything

    @property
    def suffix(self) -> str:
        """``<model><suffix>``: the variant's model name, e.g. ``butr_step_int8``."""
        return "_" + self.name

    def drops_slower(self, device: str) -> bool:
        """Whether a variant timed on ``device`` and not faster than its FP32 model is dropped."""
        return device in self.drops_slower_on

    def with_thresholds(
        self,
        cider_d_rel_change: float | None = None,
        top1_agreement: float | None = None,
        recall5_points: float | None = None,
    ) -> Thresholds:
        """Its gate's thresholds, each overridden where given."""
        given = {
            "cider_d_rel_change": cider_d_rel_change,
            "top1_agreement": top1_agreement,
            "recall5_points": recall5_points,
        }
        return replace(self.thresholds, **{k: v for k, v in given.items() if v is not None})


def _int8_describe(entry: ModelEntry, source: Path, method: str) -> str:
    return recipe(entry.role, graph_ops(source), method).describe()


def _int8_make(job: VariantJob) -> None:
    how = recipe(job.entry.role, graph_ops(job.source), job.method)
    quantize_model(job.source, job.out, how, job.calls, job.work)


def _fp16_describe(entry: ModelEntry, source: Path, method: str) -> str:
    return FP16_METHOD


def _fp16_make(job: VariantJob) -> None:
    convert_fp16(job.source, job.out)


INT8 = PrecisionSpec(
    name="int8",
    thresholds=Thresholds(cider_d_rel_change=0.02, top1_agreement=0.90, recall5_points=1.0),
    methods=("auto", "dynamic", "static"),
    describe=_int8_describe,
    make=_int8_make,
    drops_slower_on=frozenset({"cpu", "cuda"}),
    cpu_level="ORT_ENABLE_ALL",
    cpu_feature="avx512_vnni",
)
FP16 = PrecisionSpec(
    name="fp16",
    thresholds=Thresholds(cider_d_rel_change=0.01, top1_agreement=0.95, recall5_points=1.0),
    methods=("auto",),
    describe=_fp16_describe,
    make=_fp16_make,
    drops_slower_on=frozenset({"cuda"}),
    cpu_level="ORT_ENABLE_EXTENDED",
    cpu_feature="avx512_fp16",
    cpu_timing_note="FP16 is a GPU precision (tensor cores): timed on the CPU provider (no faster than "
    "FP32 there, often slower: onnxruntime casts around the CPU kernels that have no FP16 version), which "
    "says nothing about a GPU and drops no variant",
    notes=("BF16 is not built: onnxruntime's CUDA provider has only partial BF16 kernels",),
)


def _tf32_describe(entry: ModelEntry, source: Path, method: str) -> str:
    return "the FP32 graph, run with the CUDA provider's use_tf32=1"


def _tf32_make(job: VariantJob) -> None:
    import shutil

    shutil.copyfile(job.source, job.out)


TF32 = PrecisionSpec(
    name="tf32",
    thresholds=FP16.thresholds,
    methods=("auto",),
    describe=_tf32_describe,
    make=_tf32_make,
    drops_slower_on=frozenset({"cuda"}),
    cpu_level="ORT_ENABLE_ALL",
    cpu_feature="",
    notes=(
        "on Triton, TF32 is the server's (NVIDIA_TF32_OVERRIDE), not a model's: the GPU overlays set it to "
        "0, so tf32 models there compute as their FP32 ones",
    ),
    only_on="cuda",
)
SPECS: dict[str, PrecisionSpec] = {spec.name: spec for spec in (INT8, FP16, TF32)}


def spec_for(precision: str) -> PrecisionSpec:
    """The record of ``precision``; ``ValueError`` naming the choices otherwise."""
    try:
        return SPECS[precision]
    except KeyError:
        raise ValueError(f"precision must be one of {tuple(SPECS)}, got {precision!r}") from None
