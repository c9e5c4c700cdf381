"""The live probes' intervals and paired tests, in one shape, from the per-unit data each result keeps.

Every figure ``X`` a probe answers gets a sibling ``X_interval`` of the same shape with an interval
object where ``X`` has a number: ``{"estimate", "low", "high", "se", "groups", "units"}`` — the figure
(the mean of group means), the 95% percentile bootstrap interval, the bootstrap standard error, and the
groups (pairs, or 1 for a per-pair or per-bucket figure) and units (images) it rests on; ``null`` where
the figure is ``null``. The result's ``intervals`` says how they were drawn (level, resamples, seed,
unit order). The statistics are ``service.evaluation.intervals``'.

Units are always taken in ascending image id, groups in the result's row order, so the same stored
data and seed give the same interval on every machine (numpy's PCG64 draws are platform-independent)
— a client can recompute any interval from the stored per-image data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.evaluation.intervals import LEVEL, RESAMPLES, SEED, bootstrap_interval, paired_test

KEYS = ("estimate", "low", "high", "se", "groups", "units")
UNIT_ORDER = "ascending image id; groups in the result's row order"


def interval(groups: Sequence[Sequence[float]], seed: int = SEED) -> dict[str, float | int] | None:
    """The interval object of a mean of group means (None: no unit)."""
    found = bootstrap_interval(groups, seed=seed)
    if found is None:
        return None
    full = found.as_dict()
    return {k: full[k] for k in KEYS}


def method(seed: int = SEED, over: str = "pairs, then images within each pair") -> dict[str, Any]:
    """The result's ``intervals`` entry: how every ``*_interval`` (and a comparison's differences and
    p-values) was drawn."""
    return {
        "level": LEVEL,
        "resamples": RESAMPLES,
        "seed": seed,
        "method": f"percentile bootstrap over {over}",
        "test": "two-sided sign-flip permutation test of the per-image differences (paired tests)",
        "unit_order": UNIT_ORDER,
    }


def ordered(values: Mapping[Any, Any]) -> list[tuple[int, Any]]:
    """(image id, value) in ascending image id (ids may be JSON's string keys)."""
    return sorted(((int(i), v) for i, v in values.items()), key=lambda iv: iv[0])


def hits(first_hit: Mapping[Any, int | None], k: int) -> list[float]:
    """1.0 for each image (ascending id) whose first hit is at rank ``k`` or better, else 0.0."""
    return [1.0 if r is not None and r <= k else 0.0 for _, r in ordered(first_hit)]


def values(per_image: Mapping[Any, float | None], ids: Iterable[Any] | None = None) -> list[float]:
    """The non-null values of ``per_image`` (of ``ids`` only, when given), ascending image id."""
    wanted = None if ids is None else {int(i) for i in ids}
    return [float(v) for i, v in ordered(per_image) if v is not None and (wanted is None or i in wanted)]


def shared(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> tuple[dict[int, Any], dict[int, Any]]:
    """``a`` and ``b`` restricted to the image ids both hold."""
    common = {int(i) for i in a} & {int(i) for i in b}
    return (
        {int(i): v for i, v in a.items() if int(i) in common},
        {int(i): v for i, v in b.items() if int(i) in common},
    )


def paired(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], seed: int = SEED
) -> dict[str, Any] | None:
    """The paired test's answer: ``{"difference": interval object of a − b, "p_value", "permutations"}``
    (None: no unit shared)."""
    found = paired_test(a, b, seed=seed)
    if found is None:
        return None
    full = found.as_dict()
    diff = full["difference"]
    assert isinstance(diff, dict)
    return {
        "difference": {k: diff[k] for k in KEYS},
        "p_value": full["p_value"],
        "permutations": full["permutations"],
    }


__all__ = ["KEYS", "UNIT_ORDER", "hits", "interval", "method", "ordered", "paired", "shared", "values"]
