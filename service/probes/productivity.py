"""Seed 001 §4.2 productivity, scored on a probe set: how a captioner's top-1 caption grows with the
scene — per density bucket (objects in the scene) and per reference-length bucket: mean caption length
(tokens), nouns per caption, object coverage against the scene's objects, and CIDEr-D against the
references with document frequencies from the *training* references (as ``compcap evaluate`` scores;
a DF from the probe's own references would score each image against itself).

Nouns and coverage use the concept inventory's noun lexicon (every synonym and plural form of every
noun concept): a caption covers an object when it names its concept by any of those words. Scene
objects come from the probe set (SceneWorld scene graphs, or COCO instance categories mapped to the
inventory's nouns when they are in it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from service.evaluation.cider import CiderD
from service.text.concepts import ConceptInventory, load_concepts
from service.text.vocabulary import tokenize


@lru_cache(maxsize=4)
def noun_lexicon(concepts: ConceptInventory | None = None) -> dict[str, str]:
    """word -> noun concept, for every synonym and plural form of every noun of the inventory."""
    inv = concepts or load_concepts()
    table: dict[str, str] = {}
    for noun, entry in inv.nouns.items():
        words = {noun, *entry.get("synonyms", [])}
        words |= set(entry.get("plural", {}).values())
        for w in words:
            table.setdefault(w, noun)
    return table


def caption_nouns(caption: str, lexicon: Mapping[str, str]) -> list[str]:
    """Noun concepts named in ``caption``, one per noun token, in order."""
    return [lexicon[w] for w in tokenize(caption) if w in lexicon]


def coverage(caption: str, objects: Sequence[str], lexicon: Mapping[str, str]) -> float | None:
    """Share of the scene's distinct object concepts the caption names (``None`` without objects)."""
    wanted = {lexicon.get(o, o) for o in objects}
    if not wanted:
        return None
    return len(wanted & set(caption_nouns(caption, lexicon))) / len(wanted)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def bucket_scores(
    ids: Sequence[int],
    top1: Mapping[int, str],
    references: Mapping[int, Sequence[str]],
    objects: Mapping[int, Sequence[str]] | None,
    cider: CiderD | None,
    lexicon: Mapping[str, str],
) -> dict[str, Any]:
    """One bucket's figures over images ``ids`` (their top-1 captions ``top1``)."""
    if not ids:
        return {
            "images": 0,
            "length": None,
            "reference_length": None,
            "nouns": None,
            "coverage": None,
            "cider_d": None,
        }
    cider_d = None
    if cider is not None:
        cider_d, _ = cider.corpus_score({i: references[i] for i in ids}, {i: top1[i] for i in ids})
    return {
        "images": len(ids),
        "length": _mean([len(tokenize(top1[i])) for i in ids]),
        "reference_length": _mean([_mean([len(tokenize(r)) for r in references[i]]) for i in ids]),
        "nouns": _mean([len(caption_nouns(top1[i], lexicon)) for i in ids]),
        "coverage": None
        if objects is None
        else _mean([coverage(top1[i], objects.get(i, ()), lexicon) for i in ids]),
        "cider_d": cider_d,
    }


def productivity_result(
    buckets: Mapping[str, Mapping[str, Sequence[int]]],
    top1: Mapping[int, str],
    references: Mapping[int, Sequence[str]],
    objects: Mapping[int, Sequence[str]] | None,
    cider: CiderD | None,
) -> dict[str, Any]:
    """``{"by": {bucketing: {bucket: figures}}, "cider_df": bool}``; ``buckets``: bucketing ("density",
    "length") -> bucket name -> image ids (every id must be in ``top1``)."""
    lexicon = noun_lexicon()
    return {
        "by": {
            by: {
                name: bucket_scores(ids, top1, references, objects, cider, lexicon)
                for name, ids in named.items()
            }
            for by, named in buckets.items()
        },
        "cider_df": cider is not None,
    }


__all__ = ["bucket_scores", "caption_nouns", "coverage", "noun_lexicon", "productivity_result"]
