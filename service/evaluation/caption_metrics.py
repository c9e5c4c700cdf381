"""Corpus caption metrics through pycocoevalcap: BLEU-1..4 and CIDEr-D (pure Python scorers).

Captions are tokenised with ``service.text.vocabulary.tokenize`` (lower-case words, punctuation dropped)
instead of the Java PTB tokenizer. pycocoevalcap's ``Cider`` is CIDEr-D (σ = 6 length penalty, clipped
counts, ×10) with document frequencies taken from the references it is given, so score a whole split
at once: a single image scores 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider

from service.text.vocabulary import tokenize


def _normalise(text: str) -> str:
    return " ".join(tokenize(text))


def caption_metrics(
    references: Mapping[int, Sequence[str]], hypotheses: Mapping[int, str]
) -> dict[str, float]:
    """references: image id → reference captions; hypotheses: image id → one caption (same ids)."""
    if set(references) != set(hypotheses):
        raise ValueError("references and hypotheses must cover the same image ids")
    if not hypotheses:
        raise ValueError("hypotheses is empty")
    gts = {i: [_normalise(r) for r in refs] for i, refs in references.items()}
    res = {i: [_normalise(h)] for i, h in hypotheses.items()}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    cider, _ = Cider().compute_score(gts, res)
    return {**{f"bleu{n + 1}": float(b) for n, b in enumerate(bleu)}, "cider_d": float(cider)}
