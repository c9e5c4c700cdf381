"""The zero-overhead ceiling of ``compcap bench``: what share of the step-only limit a gateway with no
overhead at all could reach at a load level's rows per call, from the measured step curve (wall time
per step call at each batch size, nothing else running). Pure functions of a bench result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def step_rows_per_s(step_curve: Sequence[dict[str, float]], rows: float) -> float:
    """rows/s of the step at ``rows`` rows per call: the best measured time per call at each batch size
    (over ORT spin modes), linear in rows between measured sizes, clamped to the measured range."""
    best: dict[int, float] = {}
    for point in step_curve:
        r = int(point["rows"])
        best[r] = min(best.get(r, float("inf")), float(point["ms_per_call"]))
    if not best:
        raise ValueError("step_curve is empty")
    sizes = sorted(best)
    at = min(max(rows, sizes[0]), sizes[-1])
    ms = float(np.interp(at, sizes, [best[r] for r in sizes]))
    return at / ms * 1e3


def step_ms_alone(step_curve: Sequence[dict[str, float]], rows: float) -> float:
    """Wall ms of one step call of ``rows`` rows with nothing else running (``step_rows_per_s``)."""
    return rows / step_rows_per_s(step_curve, rows) * 1e3


def ceiling_of_limit(result: dict[str, Any], mean_rows: float) -> float:
    """The share of the step-only limit (``limit.ideal_captions_per_s``) that a gateway with no overhead
    at all could reach when its step calls carry ``mean_rows`` rows: each caption still needs its
    ``rows_per_caption`` step rows at that batch size's speed plus the other model calls of
    ``compute_limit`` (encoder, init, ranker) at large batches."""
    ms = result["compute_limit"]["ms_per_caption"]
    step_model = max(ms, key=lambda k: ms[k] if k.endswith("_step") else -1.0)
    other_ms = sum(v for k, v in ms.items() if k != step_model)
    step_ms = result["rows_per_caption"] / step_rows_per_s(result["step_curve"], mean_rows) * 1e3
    return (1e3 / (step_ms + other_ms)) / result["limit"]["ideal_captions_per_s"]


__all__ = ["ceiling_of_limit", "step_ms_alone", "step_rows_per_s"]
