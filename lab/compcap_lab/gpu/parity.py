"""How far one device's model outputs are from another's on the same inputs (``scripts/gpu_check.py``:
CPU against CUDA). Pure functions of numpy arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def relative_max_diff(reference: np.ndarray, other: np.ndarray) -> float:
    """``max |reference − other| / max |reference|``: the largest difference of one model output,
    relative to the output's scale.

    ``reference`` (the CPU's) and ``other`` (the CUDA's) are the same output of one model call, of any
    shape as long as it is the same (e.g. a step's ``logprobs`` FP32 [N, V], an encoder's ``regions``
    [B, R, D]); ints, floats, any precision — computed in float64. Returns 0.0 for empty or equal arrays,
    ``inf`` where ``reference`` is all zeros but ``other`` is not, or where a NaN or infinity stands in
    one array and not the same value in the other. ``ValueError`` when the shapes differ."""
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: reference {a.shape}, other {b.shape}")
    if a.size == 0:
        return 0.0
    finite = np.isfinite(a) & np.isfinite(b)
    # a NaN or an infinity must be matched exactly (same place, same value); elsewhere both are finite
    if not np.array_equal(a[~finite], b[~finite], equal_nan=True):
        return float("inf")
    if not finite.any():
        return 0.0
    diff = float(np.max(np.abs(a[finite] - b[finite])))
    scale = float(np.max(np.abs(a[finite])))
    if diff == 0.0:
        return 0.0
    return diff / scale if scale > 0.0 else float("inf")


def worst_output(
    reference: Sequence[Mapping[str, np.ndarray]], other: Sequence[Mapping[str, np.ndarray]]
) -> tuple[float, str]:
    """The largest ``relative_max_diff`` over calls and outputs, and the output it was found in.

    ``reference[k]`` and ``other[k]`` are the outputs (name -> array) of call ``k`` of one model on the
    same inputs on each device; both must name the same outputs. ``(0.0, "")`` without calls."""
    if len(reference) != len(other):
        raise ValueError(f"{len(reference)} reference calls but {len(other)} others")
    worst, where = 0.0, ""
    for ref, got in zip(reference, other, strict=True):
        if set(ref) != set(got):
            raise ValueError(f"outputs differ: {sorted(ref)} against {sorted(got)}")
        for name in sorted(ref):
            value = relative_max_diff(ref[name], got[name])
            if value > worst or not where:
                worst, where = value, name
    return worst, where


def float_outputs(outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The floating-point outputs of one call (name -> array): the values compared. Integer outputs (a
    step's ``top_tokens``) are indices picked by those values; where two values tie within rounding,
    either device may pick either, so they are not compared themselves."""
    return {k: v for k, v in outputs.items() if np.issubdtype(np.asarray(v).dtype, np.floating)}


__all__ = ["float_outputs", "relative_max_diff", "worst_output"]
