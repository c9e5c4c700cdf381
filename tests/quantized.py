"""A copy of the tiny repository with INT8 variants (``compcap quantize``), for the tests of INT8
serving. The tiny models are barely trained, so their captions move with any perturbation: the gate's
thresholds are opened wide here (``LENIENT``) unless a test makes one fail on purpose, and every variant
is kept whatever its speed (``min_speedup=0``: no test depends on the machine's speed)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from export.quantize import QuantizeResult, Thresholds, quantize_repo

LENIENT = Thresholds(cider_d_rel_change=1e9, top1_agreement=0.0, recall5_points=1e9)
FAST: dict[str, Any] = {
    "calibration_images": 8,
    "eval_images": 6,
    "probe_images": 1,
    "min_speedup": 0.0,
    "timing_rounds": 1,
}


def quantized_copy(tiny_repo: Path, out: Path, **options: Any) -> tuple[Path, QuantizeResult]:
    """``tiny_repo`` copied to ``out/model_repo`` and quantized there (``FAST``, ``LENIENT`` and no
    systematicity probe unless ``options`` say otherwise)."""
    repo = out / "model_repo"
    shutil.copytree(tiny_repo, repo)
    kwargs = {**FAST, "thresholds": LENIENT, "systematicity": False, **options}
    return repo, quantize_repo(repo, **kwargs)
