"""Seed 000 §3–4 systematicity, scored on a probe set: Recall@K of every pair (Eq. 1, with the
attachment checker, lemmas and synonym sets), per Table 3 category, the mean over the pairs the model
never saw together and over those it did (a control the seeds lack) — or, for an imported captioner
whose training pairs are not known, the mean over every pair — and the false-composition rate on
Test-no-Comb images (seed 001 §4.1).

Recall of a pair is computed over the Test-Comb images of its *group* (the six pairs held out
together), exactly as ``compcap evaluate --split systematicity --group g`` computes it on the probe
set's ``splits/systematicity_<g>``: same images, same references, same parser, so the live probe and
the offline command give the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.evaluation.recall import CATEGORIES, PairsFn, pair_category, recall_at_k
from service.text.concepts import ConceptPair

KS = (1, 2, 3, 4, 5)
Generated = Mapping[int, Sequence[str]]  # image id -> captions in final order (best first)


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def false_composition(
    pair: ConceptPair,
    images: Sequence[int],
    generated: Generated,
    parsed: Mapping[str, frozenset[ConceptPair]],
    ks: Sequence[int],
) -> dict[str, float | None]:
    """Share of ``images`` (both constituents present, the pair not) whose top-K captions attach
    ``pair`` anyway, per K. ``parsed``: caption -> attached pairs."""
    if not images:
        return {str(k): None for k in ks}
    out: dict[str, float | None] = {}
    for k in ks:
        hits = sum(any(pair in parsed[c] for c in generated[i][:k]) for i in images)
        out[str(k)] = hits / len(images)
    return out


def group_recall(
    pairs: Sequence[ConceptPair],
    images: Sequence[int],
    generated: Generated,
    references: Mapping[int, Sequence[str]],
    pairs_fn: PairsFn,
    ks: Sequence[int] = KS,
) -> dict[str, dict[str, Any]]:
    """Per pair label: ``{"images", "hits": {"1": n, ...}, "recall": {"1": r, ...}}`` over one group's
    Test-Comb ``images``."""
    report = recall_at_k(
        {i: generated[i] for i in images}, {i: references[i] for i in images}, pairs, pairs_fn, ks=ks
    )
    return {
        label: {
            "images": p.images,
            "hits": {str(k): p.hits[k] for k in ks},
            "recall": {str(k): p.recall[k] for k in ks},
        }
        for label, p in report.per_pair.items()
    }


def summarise(rows: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """Mean recall of ``rows`` (pair rows) overall and per Table 3 category."""
    return {
        "pairs": len(rows),
        "recall": {str(k): _mean(r["recall"][str(k)] for r in rows) for k in ks},
        "per_category": {
            cat: {str(k): _mean(r["recall"][str(k)] for r in rows if r["category"] == cat) for k in ks}
            for cat in CATEGORIES
            if any(r["category"] == cat for r in rows)
        },
    }


def systematicity_result(
    groups: Mapping[int, Sequence[ConceptPair]],
    comb: Mapping[int, Sequence[int]],
    no_comb: Mapping[str, Sequence[int]],
    reported: Sequence[ConceptPair],
    held_out: Iterable[ConceptPair] | None,
    generated: Generated,
    references: Mapping[int, Sequence[str]],
    pairs_fn: PairsFn,
    ks: Sequence[int] = KS,
    own: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """The probe's result.

    groups: group -> its pairs; comb: group -> its Test-Comb image ids; no_comb: pair label -> its
    Test-no-Comb image ids; reported: the pairs to report (their groups must be in ``groups``);
    held_out: the pairs the captioner's training held out, None when that is not known (an imported
    captioner whose import declared none): then no pair is called held out or seen (``held_out`` None
    in each row, no ``held_out`` / ``seen`` means), and ``all``, the mean over every reported pair, is
    the summary; generated: captions of every image above; own: pair label -> the Test-Comb images
    chosen for that pair when a job caps the images per pair — each pair is then scored on its own
    images only, so that it counts at most that many (on the group's images, a pair would also count
    the images chosen for its group's other pairs whose references mention it); None: every pair on its
    group's Test-Comb images, as ``compcap evaluate``."""
    ks = tuple(sorted(set(ks)))
    known = held_out is not None
    held = set(held_out or ())
    per_group = {g: group_recall(groups[g], comb[g], generated, references, pairs_fn, ks) for g in groups}
    group_of = {p: g for g, ps in groups.items() for p in ps}
    texts = sorted({c for p in reported for i in no_comb.get(p.label, ()) for c in generated[i][: ks[-1]]})
    parsed = dict(zip(texts, pairs_fn(texts), strict=True)) if texts else {}
    rows = []
    for pair in reported:
        g = group_of[pair]
        empty = {"images": 0, "hits": {str(k): 0 for k in ks}, "recall": {str(k): None for k in ks}}
        scored = (
            per_group[g]
            if own is None
            else group_recall([pair], own.get(pair.label, ()), generated, references, pairs_fn, ks)
        )
        stats = scored.get(pair.label, empty)
        images = list(no_comb.get(pair.label, ()))
        rows.append(
            {
                "pair": pair.label,
                "kind": pair.kind,
                "group": g,
                "category": pair_category(pair),
                "held_out": (pair in held) if known else None,
                "images": stats["images"],
                "hits": stats["hits"],
                "recall": stats["recall"],
                "no_comb_images": len(images),
                "false_composition": false_composition(pair, images, generated, parsed, (1, ks[-1])),
            }
        )
    fc_rows = [r for r in rows if r["no_comb_images"]]
    return {
        "ks": list(ks),
        "pairs": rows,
        "held_out_known": known,
        "held_out": summarise([r for r in rows if r["held_out"]], ks) if known else None,
        "seen": summarise([r for r in rows if not r["held_out"]], ks) if known else None,
        "all": summarise(rows, ks),
        "false_composition": {
            key: _mean(r["false_composition"][key] for r in fc_rows) for key in ("1", str(ks[-1]))
        },
        "groups": {str(g): {"images": len(comb[g])} for g in groups},
    }


__all__ = ["KS", "false_composition", "group_recall", "summarise", "systematicity_result"]
