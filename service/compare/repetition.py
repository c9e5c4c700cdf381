"""Duplicated captions (Wan et al., 2022, §4.3): a word appearing ``run`` (3) or more times in a row."""

from __future__ import annotations

from collections.abc import Sequence

from service.checks import integer_at_least
from service.text.vocabulary import tokenize


def _repeated_words(caption: str, run: int) -> list[str]:
    """Words of every run of ≥ ``run`` equal consecutive tokens, in order of position."""
    integer_at_least(2, run=run)
    tokens = tokenize(caption)
    found: list[str] = []
    start = 0
    for end in range(1, len(tokens) + 1):
        if end == len(tokens) or tokens[end] != tokens[start]:
            if end - start >= run:
                found.append(tokens[start])
            start = end
    return found


def duplicated_word(caption: str, run: int = 3) -> str | None:
    """The first word (tokenised, lower-cased) appearing ``run`` or more times consecutively, else None."""
    found = _repeated_words(caption, run)
    return found[0] if found else None


def duplicated_rate(captions: Sequence[str], run: int = 3) -> dict[str, float | int]:
    """{"captions": n, "duplicated": captions with a run, "rate": duplicated / n (0.0 when n = 0),
    "classes": number of distinct words over every run in every caption (not only each first one)}."""
    words = [_repeated_words(c, run) for c in captions]
    duplicated = sum(1 for w in words if w)
    return {
        "captions": len(captions),
        "duplicated": duplicated,
        "rate": duplicated / len(captions) if captions else 0.0,
        "classes": len({w for ws in words for w in ws}),
    }
