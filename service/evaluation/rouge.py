"""ROUGE-L as pycocoevalcap's ``Rouge().compute_score`` computes it, without pycocoevalcap.

The arithmetic follows ``pycocoevalcap/rouge/rouge.py`` (Lin 2004, β = 1.2), so the scores are the
same floats (the tests compare them to 1e-12):

- a caption is split on single spaces (``str.split(" ")``, as pycocoevalcap does: ``""`` is *one* empty
  token, so an empty hypothesis has length 1 and matches only an empty reference);
- per reference: LCS = length of the longest common subsequence of the token lists,
  precision = LCS / len(hypothesis), recall = LCS / len(reference);
- P = max precision, R = max recall over the references (taken separately: they may come from different
  references); ROUGE-L = (1 + β²) · P · R / (R + β² · P), or 0 when P or R is 0;
- the corpus score is the mean of the per-image scores (``numpy.mean``, as pycocoevalcap).

Divergence: an empty corpus raises ``ValueError`` (pycocoevalcap returns NaN with a warning).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

BETA = 1.2  # recall is weighted β² = 1.44 times as much as precision

K = TypeVar("K", bound=Hashable)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of ``a`` and ``b`` (time O(|a| · |b|), memory O(|b|))."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)  # row[j] = LCS of the prefix of a seen so far and b[:j]
    for x in a:
        diagonal = 0  # LCS of the previous prefix of a and b[:j-1]
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def rouge_l(hypothesis: str, references: Sequence[str], beta: float = BETA) -> float:
    """ROUGE-L F-score of one hypothesis against its references (≥ 1), in [0, 1]."""
    if not references:
        raise ValueError("at least one reference is needed")
    hyp = hypothesis.split(" ")
    precision = 0.0
    recall = 0.0
    for reference in references:
        ref = reference.split(" ")
        lcs = lcs_length(ref, hyp)
        precision = max(precision, lcs / len(hyp))
        recall = max(recall, lcs / len(ref))
    if precision == 0 or recall == 0:
        return 0.0
    b2 = beta**2
    return (1 + b2) * precision * recall / (recall + b2 * precision)


def corpus_rouge_l(
    references: Mapping[K, Sequence[str]], hypotheses: Mapping[K, str], beta: float = BETA
) -> tuple[float, list[float]]:
    """Mean ROUGE-L and per-image ROUGE-L, as ``Rouge().compute_score(gts, res)``.

    references: image id → reference captions (≥ 1, space-joined tokens);
    hypotheses: image id → one caption; the same ids as ``references``.
    Returns ``(mean, per_image)``; ``per_image[j]`` is the score of the j-th image in the order of
    ``references``."""
    if set(references) != set(hypotheses):
        raise ValueError("references and hypotheses must cover the same image ids")
    if not references:
        raise ValueError("the corpus is empty")
    if any(len(refs) == 0 for refs in references.values()):
        raise ValueError("every image needs at least one reference")
    scores = [rouge_l(hypotheses[i], references[i], beta) for i in references]
    return float(np.mean(np.array(scores))), scores


__all__ = ["BETA", "corpus_rouge_l", "lcs_length", "rouge_l"]
