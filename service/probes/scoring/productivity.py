"""Productivity (Pantazopoulos et al., 2022, §4.2), scored on a probe set: how a captioner's top-1
caption grows with the scene — per density bucket (objects in the scene) and per reference-length
bucket: mean caption length (tokens), nouns per caption, object coverage against the scene's objects,
and CIDEr-D against the references with document frequencies from the *training* references (as
``compcap-lab evaluate`` scores; a DF from the probe's own references would score each image against
itself).

Nouns and coverage use the concept inventory's noun lexicon (every synonym and plural form of every
noun concept): a caption covers an object when it names its concept by any of those words. Scene
objects come from the probe set (SceneWorld scene graphs, or COCO instance categories mapped to the
inventory's nouns when they are in it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from service.evaluation.cider import CiderD
from service.evaluation.intervals import SEED
from service.probes.scoring.uncertainty import interval, method, paired, values
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


FIGURES = ("length", "nouns", "coverage", "cider_d")  # the per-image figures a bucket averages


def per_image(
    ids: Sequence[int],
    top1: Mapping[int, str],
    references: Mapping[int, Sequence[str]],
    objects: Mapping[int, Sequence[str]] | None,
    cider: CiderD | None,
    lexicon: Mapping[str, str],
) -> dict[str, dict[int, float | None]]:
    """Figure (``FIGURES``) -> image -> the top-1 caption's value: tokens, nouns named, object coverage
    (None without objects), CIDEr-D against the image's references (with ``cider``'s DF; None without)."""
    scores = (
        cider.corpus_score({i: references[i] for i in ids}, {i: top1[i] for i in ids})[1]
        if ids and cider
        else {}
    )
    return {
        "length": {i: float(len(tokenize(top1[i]))) for i in ids},
        "nouns": {i: float(len(caption_nouns(top1[i], lexicon))) for i in ids},
        "coverage": {
            i: None if objects is None else coverage(top1[i], objects.get(i, ()), lexicon) for i in ids
        },
        "cider_d": {i: scores.get(i) for i in ids},
    }


def bucket_scores(
    ids: Sequence[int],
    each: Mapping[str, Mapping[int, float | None]],
    references: Mapping[int, Sequence[str]],
    cider_d: bool,
) -> dict[str, Any]:
    """One bucket's figures over images ``ids``: the means of their per-image values ``each``
    (``per_image``; a figure None for every image, as coverage without objects, is None), the mean
    reference length, and (``cider_d``: scored with a DF) the mean CIDEr-D, an unscored image as 0."""
    if not ids:
        return {"images": 0, **dict.fromkeys(["length", "reference_length", "nouns", "coverage", "cider_d"])}
    return {
        "images": len(ids),
        "length": _mean([each["length"][i] for i in ids]),
        "reference_length": _mean([_mean([len(tokenize(r)) for r in references[i]]) for i in ids]),
        "nouns": _mean([each["nouns"][i] for i in ids]),
        "coverage": _mean([each["coverage"][i] for i in ids]),
        "cider_d": sum(float(each["cider_d"][i] or 0.0) for i in ids) / len(ids) if cider_d else None,
    }


def with_intervals(result: dict[str, Any], seed: int = SEED) -> dict[str, Any]:
    """``result`` with ``<figure>_interval`` beside each bucket's length, nouns, coverage and CIDEr-D:
    a bootstrap over the bucket's images of the per-image values the result keeps (``per_image``);
    ``intervals``: how. In place; returned."""
    each = result.get("per_image") or {}
    for by, named in (result.get("by") or {}).items():
        for name, bucket in named.items():
            ids = (result.get("bucket_images") or {}).get(f"{by}/{name}")
            for figure in FIGURES:
                data = values(each.get(figure) or {}, ids) if ids is not None else []
                bucket[f"{figure}_interval"] = (
                    interval([data], seed) if bucket.get(figure) is not None else None
                )
    result["intervals"] = method(seed, over="the bucket's images (one group)")
    return result


def compare(a: Mapping[str, Any], b: Mapping[str, Any], seed: int = SEED) -> dict[str, Any]:
    """Paired tests of two productivity results on the images both scored, figure name
    (``<bucketing>.<bucket>.<figure>``) -> test of ``a`` − ``b`` over the bucket's shared images.
    ``ValueError`` naming why when they keep no per-image data or share no image."""
    for name, r in (("the first", a), ("the second", b)):
        if "per_image" not in r:
            raise ValueError(f"{name} job's result keeps no per-image figures (it predates intervals)")
    figures: dict[str, Any] = {}
    images = 0
    buckets_b = b.get("bucket_images") or {}
    for key, ids_a in (a.get("bucket_images") or {}).items():
        ids = sorted(set(ids_a) & set(buckets_b.get(key, ())))
        images = max(images, len(ids))
        for figure in FIGURES:
            va, vb = (r["per_image"].get(figure) or {} for r in (a, b))
            kept = [i for i in ids if va.get(str(i)) is not None and vb.get(str(i)) is not None]
            figures[f"{key.replace('/', '.')}.{figure}"] = (
                paired([values(va, kept)], [values(vb, kept)], seed) if kept else None
            )
    if images == 0:
        raise ValueError("the two results share no image: probe the same probe set with the same images")
    return {"figures": figures, "intervals": method(seed, over="the bucket's images (one group)")}


def productivity_result(
    buckets: Mapping[str, Mapping[str, Sequence[int]]],
    top1: Mapping[int, str],
    references: Mapping[int, Sequence[str]],
    objects: Mapping[int, Sequence[str]] | None,
    cider: CiderD | None,
    seed: int | None = SEED,
) -> dict[str, Any]:
    """``{"by": {bucketing: {bucket: figures}}, "cider_df": bool, "per_image": {figure: {image:
    value}}, "bucket_images": {"<bucketing>/<bucket>": [image, ...]}}`` with each figure's interval
    (``with_intervals``; ``seed`` None: without); ``buckets``: bucketing ("density", "length") ->
    bucket name -> image ids (every id must be in ``top1``)."""
    lexicon = noun_lexicon()
    ids = sorted({i for named in buckets.values() for v in named.values() for i in v})
    each = per_image(ids, top1, references, objects, cider, lexicon)
    result = {
        "by": {
            by: {name: bucket_scores(ids, each, references, cider is not None) for name, ids in named.items()}
            for by, named in buckets.items()
        },
        "cider_df": cider is not None,
        "per_image": {f: {str(i): v for i, v in each[f].items()} for f in FIGURES},
        "bucket_images": {
            f"{by}/{name}": sorted(v) for by, named in buckets.items() for name, v in named.items()
        },
    }
    return result if seed is None else with_intervals(result, seed)


__all__ = [
    "FIGURES",
    "bucket_scores",
    "caption_nouns",
    "compare",
    "coverage",
    "noun_lexicon",
    "per_image",
    "productivity_result",
    "with_intervals",
]
