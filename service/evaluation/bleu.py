"""Corpus BLEU-1..4 as pycocoevalcap's ``Bleu(4).compute_score`` computes it, without pycocoevalcap.

The gateway scores live-probe captions with these functions, so the serve-only install needs neither
pycocoevalcap nor its Java jars. The arithmetic follows ``pycocoevalcap/bleu/bleu_scorer.py``
(``BleuScorer.compute_score(option="closest")``) operation for operation, so the scores are the same
floats (the tests compare them to 1e-12):

- a caption is split on whitespace (``str.split()``: ``""`` has no words);
- per image, for k = 1..n: ``guess[k]`` = number of k-grams of the hypothesis (``max(0, len − k + 1)``),
  ``correct[k]`` = its k-gram counts clipped by the largest count of that k-gram in any one reference;
- the reference length is the *closest* one to the hypothesis length, ties to the shorter reference;
- BLEU-k = (∏_{j≤k} (correct[j] + TINY) / (guess[j] + SMALL)) ** (1/k), TINY = 1e-15, SMALL = 1e-9
  (so a hypothesis with no k-grams scores ≈ 0, never a division by zero), times the brevity penalty
  exp(1 − 1/ratio) when ratio = (hyp_len + TINY) / (ref_len + SMALL) < 1;
- the corpus score uses the same formula on ``correct``, ``guess`` and the lengths summed over images
  (not a mean of the per-image scores).

Consequences kept from pycocoevalcap: an empty hypothesis scores 0 (its brevity penalty is exp(−~1e15)),
also against an empty reference; a hypothesis identical to a reference of ≥ k words scores
BLEU-k = 1 − O(1e-9); a hypothesis of fewer than k words is not left out: each missing order contributes
a factor TINY / SMALL = 1e-6 (e.g. a matching single word has BLEU-4 ≈ 3e-5). Divergence: an empty corpus
raises ``ValueError`` (pycocoevalcap returns zeros).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from service.checks import at_least

TINY = 1e-15  # added to the matched counts and the hypothesis length (pycocoevalcap's ``tiny``)
SMALL = 1e-9  # added to the n-gram counts and the reference length (pycocoevalcap's ``small``)

K = TypeVar("K", bound=Hashable)
NGram = tuple[str, ...]


def ngram_counts(words: Sequence[str], n: int) -> Counter[NGram]:
    """Counts of all 1..n-grams of ``words`` (tuples of length 1..n)."""
    counts: Counter[NGram] = Counter()
    for k in range(1, n + 1):
        for i in range(len(words) - k + 1):
            counts[tuple(words[i : i + k])] += 1
    return counts


def closest_length(ref_lengths: Sequence[int], hyp_length: int) -> int:
    """The reference length closest to ``hyp_length``; of two equally close, the shorter."""
    return min(ref_lengths, key=lambda length: (abs(length - hyp_length), length))


@dataclass(frozen=True)
class BleuStats:
    """Sufficient statistics of one hypothesis (or, summed, of a corpus).

    hyp_length, ref_length: words in the hypothesis and in its closest reference;
    guess[k], correct[k] (k = 0..n−1): (k+1)-grams in the hypothesis, and those matched by a reference
    (clipped counts). Both tuples have length n."""

    hyp_length: int
    ref_length: int
    guess: tuple[int, ...]
    correct: tuple[int, ...]

    def __add__(self, other: BleuStats) -> BleuStats:
        if len(self.guess) != len(other.guess):
            raise ValueError("BleuStats of different n")
        return BleuStats(
            self.hyp_length + other.hyp_length,
            self.ref_length + other.ref_length,
            tuple(a + b for a, b in zip(self.guess, other.guess, strict=True)),
            tuple(a + b for a, b in zip(self.correct, other.correct, strict=True)),
        )


def bleu_stats(hypothesis: str, references: Sequence[str], n: int = 4) -> BleuStats:
    """Statistics of one hypothesis against its references (≥ 1; space-joined tokens each)."""
    if not references:
        raise ValueError("at least one reference is needed")
    words = hypothesis.split()
    ref_words = [r.split() for r in references]
    max_ref: Counter[NGram] = Counter()
    for ref in ref_words:
        max_ref |= ngram_counts(ref, n)  # | keeps the larger count of each n-gram
    clipped = ngram_counts(words, n) & max_ref  # & keeps the smaller
    correct = [0] * n
    for ngram, count in clipped.items():
        correct[len(ngram) - 1] += count
    return BleuStats(
        hyp_length=len(words),
        ref_length=closest_length([len(r) for r in ref_words], len(words)),
        guess=tuple(max(0, len(words) - k) for k in range(n)),
        correct=tuple(correct),
    )


def bleu_from_stats(stats: BleuStats) -> list[float]:
    """BLEU-1..n of ``stats`` (length n, each in [0, 1])."""
    scores: list[float] = []
    product = 1.0
    for k, (correct, guess) in enumerate(zip(stats.correct, stats.guess, strict=True)):
        product *= (correct + TINY) / (guess + SMALL)
        scores.append(product ** (1.0 / (k + 1)))
    ratio = (stats.hyp_length + TINY) / (stats.ref_length + SMALL)
    if ratio < 1:
        penalty = math.exp(1 - 1 / ratio)
        scores = [s * penalty for s in scores]
    return scores


def corpus_bleu(
    references: Mapping[K, Sequence[str]], hypotheses: Mapping[K, str], n: int = 4
) -> tuple[list[float], list[list[float]]]:
    """Corpus BLEU-1..n and per-image BLEU-1..n, as ``Bleu(n).compute_score(gts, res)``.

    references: image id → reference captions (≥ 1, space-joined tokens);
    hypotheses: image id → one caption; the same ids as ``references``.
    Returns ``(corpus, per_image)``: ``corpus`` has length n; ``per_image[k][j]`` is BLEU-(k+1) of the
    j-th image in the order of ``references`` (shape n × images, pycocoevalcap's layout)."""
    at_least(1, n=n)
    ids = _corpus_ids(references, hypotheses)
    per_stats = [bleu_stats(hypotheses[i], references[i], n) for i in ids]
    total = per_stats[0]
    for s in per_stats[1:]:
        total = total + s
    per_image = [bleu_from_stats(s) for s in per_stats]
    return bleu_from_stats(total), [[scores[k] for scores in per_image] for k in range(n)]


def _corpus_ids(references: Mapping[K, Sequence[str]], hypotheses: Mapping[K, str]) -> list[K]:
    if set(references) != set(hypotheses):
        raise ValueError("references and hypotheses must cover the same image ids")
    if not references:
        raise ValueError("the corpus is empty")
    ids = list(references)
    if any(len(references[i]) == 0 for i in ids):
        raise ValueError("every image needs at least one reference")
    return ids


__all__ = [
    "SMALL",
    "TINY",
    "BleuStats",
    "bleu_from_stats",
    "bleu_stats",
    "closest_length",
    "corpus_bleu",
    "ngram_counts",
]
