"""How the reports read their p-values: the verdict rule, Holm–Bonferroni adjustment over a family of
tests, and the floor of a sign-flip permutation p-value.

A paired test's p-value is ``(exceed + 1) / (permutations + 1)`` (``service.evaluation.intervals
.paired_test``): when none of the ``permutations`` random sign flips is as extreme as the observed
difference it is ``1 / (permutations + 1)`` — about 0.0001 at 10 000 permutations — the smallest value
the test can give, set by the number of permutations, not by the data. Such a p-value is printed as a
bound, "< 0.0002 (10 000 permutations)" (``p_text``), never as "= 0.0001".

A report names its *family*: the paired tests whose verdicts it states. Holm's step-down adjustment
(``holm``) of the family's p-values controls the probability of any false rejection in the family at the
level, whatever the dependence between the tests; the reports print it beside the raw p-value. Where a
p-value at the floor decides an adjusted one, the adjusted value is a bound too (``holm_texts``).

Nothing here knows captions or models: plain floats and ``PairedTest.as_dict``-shaped dicts
(``{"difference": {"estimate", "low", "high", ...}, "p_value", "permutations"}``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

PERMUTATIONS = 10_000  # ``paired_test``'s default: what a stored test without the count used

VERDICTS = {
    "higher": "a is higher (interval above 0)",
    "lower": "b is higher (interval below 0)",
    "not significant": "no significant difference (interval spans 0)",
    "mixed": "not settled: the permutation test, which takes these pairs as given, rejects equality, "
    "but the interval over pairs spans 0",
}


def verdict(test: Mapping[str, Any], level: float = 0.05) -> str:
    """What a paired test (``PairedTest.as_dict``) supports of a against b at ``level``: "higher" or
    "lower" when the interval excludes 0 and p < level, "not significant" when neither does, and
    "mixed" when they disagree — the sign-flip p-value takes the pairs as given, the interval resamples
    them, so a difference carried by few pairs can pass one and not the other."""
    d = test["difference"]
    off = d["low"] > 0 or d["high"] < 0
    small = test["p_value"] < level
    if off and small:
        return "higher" if d["low"] > 0 else "lower"
    if not off and not small:
        return "not significant"
    return "mixed"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values of a family of ``m = len(p_values)`` tests, in the order given.

    ``p_values[i]``: the raw p-value of test ``i``, in [0, 1]. With the raw values sorted,
    ``p_(1) ≤ … ≤ p_(m)``, the adjusted value of the ``j``-th smallest is
    ``min(1, max_{l ≤ j} (m − l + 1) · p_(l))`` (ties keep their given order; the result does not depend
    on it). Rejecting the tests whose adjusted value is below α keeps the family-wise error rate at α
    under any dependence between the tests. ``[]`` for ``[]``."""
    for p in p_values:
        if not 0.0 <= p <= 1.0 or math.isnan(p):
            raise ValueError(f"p-values must lie in [0, 1], got {p}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def at_floor(p: float, permutations: int) -> bool:
    """Whether ``p`` is the permutation test's floor ``1 / (permutations + 1)``: no permutation reached
    the observed difference (a stored p rounded to 4 or 6 decimals still counts)."""
    return p * (permutations + 1) < 1.5


def floor_bound(permutations: int) -> float:
    """The bound printed for a p-value at the floor: ``2 / (permutations + 1)`` rounded up to one
    significant figure — 0.0002 for 10 000 permutations."""
    x = 2.0 / (permutations + 1)
    scale = 10.0 ** math.floor(math.log10(x))
    return math.ceil(x / scale - 1e-9) * scale


def _g(p: float) -> str:
    return f"{p:.3g}"


def _permutations(test: Mapping[str, Any]) -> int:
    return int(test.get("permutations") or PERMUTATIONS)


def count_text(n: int) -> str:
    """An integer as the reports print counts: "10 000"."""
    return f"{n:,}".replace(",", " ")


def p_text(p: float, permutations: int = PERMUTATIONS) -> str:
    """A p-value as the reports print it: "0.0841", or at the floor "< 0.0002" (the caller says how many
    permutations, e.g. ``p_phrase``)."""
    return f"< {_g(floor_bound(permutations))}" if at_floor(p, permutations) else _g(p)


def p_phrase(test: Mapping[str, Any], count: bool = True) -> str:
    """ "p = 0.0841", or at the floor "p < 0.0002, 10 000 permutations" (without ``count``: "p < 0.0002")."""
    n = _permutations(test)
    if at_floor(float(test["p_value"]), n):
        return f"p {p_text(float(test['p_value']), n)}" + (f", {count_text(n)} permutations" if count else "")
    return f"p = {p_text(float(test['p_value']), n)}"


def holm_values(tests: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The family ``tests`` (name → ``PairedTest.as_dict``), each test's Holm-adjusted p-value."""
    names = list(tests)
    return dict(zip(names, holm([float(tests[n]["p_value"]) for n in names]), strict=True))


def holm_texts(tests: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each test's Holm-adjusted p-value as printed: the value (``holm_values``), or "< x" where a raw
    p-value at the floor decides it — x the adjustment with every floored p-value replaced by its bound
    (``floor_bound``), which the adjusted value stays below."""
    names = list(tests)
    plain = holm_values(tests)
    bounded = holm(
        [
            floor_bound(_permutations(tests[n]))
            if at_floor(float(tests[n]["p_value"]), _permutations(tests[n]))
            else float(tests[n]["p_value"])
            for n in names
        ]
    )
    return {
        n: (f"< {_g(b)}" if not math.isclose(plain[n], b) and b < 1.0 else _g(plain[n]))
        for n, b in zip(names, bounded, strict=True)
    }


def holm_verdict(test: Mapping[str, Any], adjusted: float, level: float = 0.05) -> str:
    """``verdict`` with the Holm-adjusted p-value in place of the raw one."""
    return verdict({**test, "p_value": adjusted}, level)


__all__ = [
    "PERMUTATIONS",
    "VERDICTS",
    "at_floor",
    "count_text",
    "floor_bound",
    "holm",
    "holm_texts",
    "holm_values",
    "holm_verdict",
    "p_phrase",
    "p_text",
    "verdict",
]
