"""N-gram similarity metric (NGSM) of Wan et al. (2022), Eqs. 1–4, and the discrepancy order of Eq. 6.

NGSM_n(a, b) = Cl_n / (U_n(a) + U_n(b) − Cl_n), a multiset Jaccard of the n-grams of order n, where
Cl_n = Σ_w min(O_a(w), O_b(w)) (clipped co-counts) and U_n(s) = number of n-grams in s. S(a, b) is the
geometric mean of NGSM_n over n; smaller S means larger discrepancy. The choices the paper leaves open:

- orders: n = 1..4 (``max_n``, default 4);
- tokenisation: ``service.text.vocabulary.tokenize`` (lower-cased words; punctuation and digits dropped);
- an order n for which *neither* caption has an n-gram (both shorter than n words) is skipped — counted
  neither as 0 nor as 1 — and the geometric mean is taken over the remaining orders; when only one
  caption has n-grams of order n, NGSM_n = 0;
- empty captions (no tokens): both empty → S = 1.0, exactly one empty → S = 0.0;
- ties: any NGSM_n = 0 makes S = 0, which would tie many pairs; ``ngsm_profile`` also returns the
  arithmetic mean of the defined NGSM_n, and ``discrepancy_order`` sorts by (S, mean, key, index), so two
  pairs at S = 0 are ordered by how much they still share (less shared = more discrepant first).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from service.checks import integer_at_least
from service.text.vocabulary import tokenize


def ngram_counts(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    """Counts of exactly the n-grams of order ``n`` in ``tokens`` (len(tokens) − n + 1 of them, or none)."""
    integer_at_least(1, n=n)
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def ngsm_n(a: Sequence[str], b: Sequence[str], n: int) -> float | None:
    """NGSM_n (Eq. 1) of two token lists, in [0, 1]; None when neither has an n-gram of order ``n``."""
    ca, cb = ngram_counts(a, n), ngram_counts(b, n)
    ua, ub = sum(ca.values()), sum(cb.values())
    if ua == 0 and ub == 0:
        return None
    clipped = sum(min(c, cb[w]) for w, c in ca.items() if w in cb)
    return clipped / (ua + ub - clipped)


def ngsm_orders(a: str, b: str, max_n: int = 4) -> list[float | None]:
    """NGSM_n of two captions for n = 1..max_n ([max_n]; the per-order overlaps S is the geometric mean
    of): None for an order neither caption has an n-gram of (skipped by S); one 0 makes S = 0."""
    integer_at_least(1, max_n=max_n)
    ta, tb = tokenize(a), tokenize(b)
    return [ngsm_n(ta, tb, n) for n in range(1, max_n + 1)]


def _defined(a: str, b: str, max_n: int) -> list[float] | None:
    """NGSM_n for n = 1..max_n, None-orders dropped; None when exactly one caption is empty."""
    integer_at_least(1, max_n=max_n)
    ta, tb = tokenize(a), tokenize(b)
    if not ta and not tb:
        return []
    if not ta or not tb:
        return None
    return [v for n in range(1, max_n + 1) if (v := ngsm_n(ta, tb, n)) is not None]


def ngsm_profile(a: str, b: str, max_n: int = 4) -> tuple[float, float]:
    """(S, arithmetic mean of the defined NGSM_n): S of Eq. 4 and the tie-break for S = 0."""
    values = _defined(a, b, max_n)
    if values is None:
        return 0.0, 0.0
    if not values:
        return 1.0, 1.0
    mean = sum(values) / len(values)
    if min(values) == 0.0:
        return 0.0, mean
    return math.exp(sum(math.log(v) for v in values) / len(values)), mean


def ngsm(a: str, b: str, max_n: int = 4) -> float:
    """S(a, b) of Eq. 4: geometric mean of the defined NGSM_n, n = 1..max_n; in [0, 1], symmetric."""
    return ngsm_profile(a, b, max_n)[0]


def discrepancy_order(
    similarities: Sequence[tuple[float, float]], keys: Sequence[Hashable] | None = None
) -> list[int]:
    """Indices of ``similarities`` (``ngsm_profile`` pairs, [N]) most discrepant first: ascending S, then
    ascending arithmetic mean, then ascending key (when ``keys`` [N] is given, e.g. image ids, so the order
    does not depend on input order; keys that cannot be compared are compared by ``repr``), then index."""
    values = [(float(s), float(m)) for s, m in similarities]
    if any(math.isnan(s) or math.isnan(m) for s, m in values):
        raise ValueError("similarities must not contain NaN")
    if keys is None:
        return sorted(range(len(values)), key=lambda i: (values[i], i))
    if len(keys) != len(values):
        raise ValueError(f"keys has {len(keys)} entries, similarities has {len(values)}")
    comparable: list[Any] = list(keys)
    try:
        by_key = sorted(range(len(keys)), key=lambda i: comparable[i])
    except TypeError:
        by_key = sorted(range(len(keys)), key=lambda i: repr(keys[i]))
    key_rank = {i: r for r, i in enumerate(by_key)}
    return sorted(range(len(values)), key=lambda i: (values[i], key_rank[i], i))


def pairwise_ngsm(captions: Sequence[str], max_n: int = 4) -> np.ndarray:
    """S between every pair of ``captions`` [m]: float64 [m, m], symmetric, diagonal 1."""
    integer_at_least(1, max_n=max_n)
    m = len(captions)
    out = np.eye(m, dtype=np.float64)
    for i in range(m):
        for j in range(i + 1, m):
            out[i, j] = out[j, i] = ngsm(captions[i], captions[j], max_n)
    return out
