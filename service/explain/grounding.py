"""Grounding and alignment metrics of Cornia et al. (2022, §4.2 and §5.2) (pure; shapes in the docstrings).

- ``grounding_score``: GroundingScore(δ) = 100 · mean over noun steps t of max over τ ∈ [t−δ, t] of
  sim(w_t, c_τ), c_τ the class under the highest-attributed region at step τ. Monotone in δ by
  construction (a wider window only adds candidates to the max).
- ``needleman_wunsch``: optimal global alignment of two noun lists, match = similarity, gap = −1,
  normalised by the longer list (∈ [−1, 1]).
- ``coverage``: Hungarian assignment (maximum total similarity) of caption nouns to ground-truth
  classes; intersection score / number of ground-truth classes.

Similarity is exact class identity (``Lexicon``): Cornia et al. (2022) used GloVe cosine, unavailable offline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from service.evaluation.intervals import bootstrap_interval

DELTAS: tuple[float, ...] = (0, 1, 3, 5, math.inf)
GAP = -1.0


def delta_key(delta: float) -> str:
    """``"0"``, ``"1"``, …, ``"inf"``: the JSON key of a δ."""
    return "inf" if math.isinf(delta) else str(int(delta))


def _best(sim: np.ndarray, nouns: np.ndarray, delta: float) -> list[float]:
    best = []
    for t in np.flatnonzero(nouns):
        start = 0 if math.isinf(delta) else max(0, t - int(delta))
        best.append(float(sim[t, start : t + 1].max()))
    return best


def noun_scores(sim: np.ndarray, nouns: np.ndarray, delta: float) -> list[float]:
    """Per noun step t (in order), 100 · max over τ ∈ [t−δ, t] of sim[t, τ]: the values GroundingScore(δ)
    averages ([] without a noun)."""
    return [100.0 * v for v in _best(sim, nouns, delta)]


def grounding_score(sim: np.ndarray, nouns: np.ndarray, delta: float) -> float | None:
    """``sim`` float [T, T]: sim[t, τ] = similarity of word t to the class under step τ's argmax;
    ``nouns`` bool [T]: the noun steps. None when the caption has no noun."""
    best = _best(sim, nouns, delta)
    return 100.0 * float(np.mean(best)) if best else None


def grounding_intervals(
    sim: np.ndarray, nouns: np.ndarray, deltas: Sequence[float] = DELTAS
) -> dict[str, dict[str, float | int]] | None:
    """GroundingScore(δ) of one caption is a mean over its nouns: per δ key, its 95% bootstrap interval
    over those nouns (``service.evaluation.intervals``; seeded, so the same caption gives the same
    interval). With one or two nouns it is as wide as the nouns disagree — the point of showing it.
    None when the caption has no noun."""
    if not np.any(nouns):
        return None
    out = {}
    for d in deltas:
        found = bootstrap_interval([noun_scores(sim, nouns, d)])
        if found is not None:
            out[delta_key(d)] = {
                "low": round(found.low, 6),
                "high": round(found.high, 6),
                "nouns": found.units,
            }
    return out


def grounding_scores(
    sim: np.ndarray, nouns: np.ndarray, deltas: Sequence[float] = DELTAS
) -> dict[str, float] | None:
    """GroundingScore at each δ, keyed by ``delta_key``; None when the caption has no noun."""
    if not np.any(nouns):
        return None
    return {delta_key(d): grounding_score(sim, nouns, d) or 0.0 for d in deltas}


def needleman_wunsch(
    predicted: Sequence[str], reference: Sequence[str], sim: Callable[[str, str], float] | None = None
) -> float:
    """Alignment score of two noun sequences / max(len): 1.0 identical, −1.0 nothing aligns; 0.0 when
    both are empty. ``sim`` defaults to exact identity."""
    sim = sim or (lambda a, b: 1.0 if a == b else 0.0)
    n, m = len(predicted), len(reference)
    if not max(n, m):
        return 0.0
    table = np.zeros((n + 1, m + 1))
    table[:, 0] = GAP * np.arange(n + 1)
    table[0, :] = GAP * np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            table[i, j] = max(
                table[i - 1, j - 1] + sim(predicted[i - 1], reference[j - 1]),
                table[i - 1, j] + GAP,
                table[i, j - 1] + GAP,
            )
    return float(table[n, m]) / max(n, m)


def coverage(
    predicted: Sequence[str], reference: Sequence[str], sim: Callable[[str, str], float] | None = None
) -> float | None:
    """Soft coverage of the ``reference`` classes by the ``predicted`` nouns (Hungarian assignment,
    ``scipy.optimize.linear_sum_assignment``); None when there is no reference class."""
    if not reference:
        return None
    if not predicted:
        return 0.0
    from scipy.optimize import linear_sum_assignment  # the `explain` extra

    sim = sim or (lambda a, b: 1.0 if a == b else 0.0)
    profit = np.array([[sim(p, r) for r in reference] for p in predicted], dtype=np.float64)
    rows, cols = linear_sum_assignment(profit, maximize=True)
    return float(profit[rows, cols].sum()) / len(reference)


def pointing_hits(hits: Sequence[bool]) -> float | None:
    """Share of noun steps whose argmax fell in a box of the named class; None without such steps."""
    return None if not hits else float(np.mean(hits))
