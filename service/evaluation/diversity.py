"""Diversity of generated captions (Nikolaus et al., 2019, Table 4, metrics as defined by van Miltenburg
et al. 2018, "Measuring the diversity of automatic image descriptions", COLING).

Over one caption per image (tokenised with ``service.text.vocabulary.tokenize``):

- ``asl``   average sentence length in tokens (``asl_std``: its population standard deviation);
- ``types`` number of distinct word types used;
- ``ttr1``  mean segmental type–token ratio: the tokens of all captions, concatenated in order, are cut
            into consecutive segments of ``segment`` tokens (default 1000; an incomplete last segment is
            dropped) and the TTR (types / tokens) of the segments is averaged;
- ``ttr2``  the same for bigrams, taken over the concatenated token stream as in van Miltenburg's code
            (so one bigram straddles each caption boundary);
- ``novel`` fraction of captions that do not occur verbatim (after tokenisation) among the training
            captions. Table 4 prints it as a percentage; here it is a fraction in [0, 1].

When the corpus has fewer than ``segment`` tokens (bigrams), no segment is complete and ``ttr1``
(``ttr2``) falls back to the plain TTR of the whole corpus, so small evaluations still get a value.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from service.checks import at_least
from service.text.vocabulary import tokenize

DEFAULT_SEGMENT = 1000


@dataclass(frozen=True)
class DiversityReport:
    captions: int
    asl: float
    asl_std: float
    types: int
    ttr1: float
    ttr2: float
    novel: float | None  # None when no training captions were given

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalised(caption: str) -> str:
    return " ".join(tokenize(caption))


def training_index(train_captions: Iterable[str]) -> frozenset[str]:
    """Normalised training captions, for ``novel`` (build once, reuse across runs)."""
    return frozenset(normalised(c) for c in train_captions)


def mean_segmental_ttr(items: Sequence[Hashable], segment: int = DEFAULT_SEGMENT) -> float:
    """Mean TTR over the complete consecutive segments of ``segment`` items; plain TTR when there is no
    complete segment; 0.0 for an empty sequence."""
    at_least(1, segment=segment)
    if not items:
        return 0.0
    ttrs = [len(set(items[i : i + segment])) / segment for i in range(0, len(items) - segment + 1, segment)]
    if not ttrs:
        return len(set(items)) / len(items)
    return sum(ttrs) / len(ttrs)


def diversity(
    captions: Sequence[str],
    train_captions: Iterable[str] | frozenset[str] | None = None,
    segment: int = DEFAULT_SEGMENT,
) -> DiversityReport:
    """Diversity metrics of ``captions`` (one per image). ``train_captions``: raw training captions or
    a ``training_index``; ``None`` leaves ``novel`` as ``None``."""
    if not captions:
        raise ValueError("captions is empty")
    tokenised = [tokenize(c) for c in captions]
    lengths = [len(t) for t in tokenised]
    asl = sum(lengths) / len(lengths)
    asl_std = (sum((x - asl) ** 2 for x in lengths) / len(lengths)) ** 0.5
    stream = [w for t in tokenised for w in t]
    bigrams = list(pairwise(stream))
    novel: float | None = None
    if train_captions is not None:
        index = train_captions if isinstance(train_captions, frozenset) else training_index(train_captions)
        novel = sum(" ".join(t) not in index for t in tokenised) / len(tokenised)
    return DiversityReport(
        captions=len(captions),
        asl=asl,
        asl_std=asl_std,
        types=len(set(stream)),
        ttr1=mean_segmental_ttr(stream, segment),
        ttr2=mean_segmental_ttr(bigrams, segment),
        novel=novel,
    )


__all__ = ["DiversityReport", "diversity", "mean_segmental_ttr", "training_index"]
