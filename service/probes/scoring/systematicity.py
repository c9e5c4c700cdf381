"""Systematicity (Nikolaus et al., 2019, §3–4), scored on a probe set: Recall@K of every pair (Eq. 1,
with the attachment checker, lemmas and synonym sets), per Table 3 category, the mean over the pairs the model
never saw together and over those it did (a control the papers lack) — or, for an imported captioner
whose training pairs are not known, the mean over every pair — and the false-composition rate on
Test-no-Comb images (Pantazopoulos et al., 2022, §4.1).

Recall of a pair is computed over the Test-Comb images of its *group* (the six pairs held out
together), exactly as ``compcap-lab evaluate --split systematicity --group g`` computes it on the probe
set's ``splits/systematicity_<g>``: same images, same references, same parser, so the live probe and
the offline command give the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.evaluation.intervals import SEED
from service.evaluation.recall import CATEGORIES, PairsFn, pair_category, recall_at_k
from service.probes.scoring.uncertainty import hits, interval, method, paired, shared
from service.text.concepts import ConceptPair

KS = (1, 2, 3, 4, 5)
Generated = Mapping[int, Sequence[str]]  # image id -> captions in final order (best first)


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def first_hits(
    pair: ConceptPair,
    images: Sequence[int],
    generated: Generated,
    parsed: Mapping[str, frozenset[ConceptPair]],
    k_max: int,
) -> dict[int, int | None]:
    """Image -> the rank (1..``k_max``) of its first caption that attaches ``pair``, None: none does.
    ``parsed``: caption -> attached pairs."""
    return {
        i: next((rank for rank, c in enumerate(generated[i][:k_max], 1) if pair in parsed[c]), None)
        for i in images
    }


def hit_rates(first: Mapping[Any, int | None], ks: Sequence[int]) -> dict[str, float | None]:
    """Per K, the share of images whose first hit is at rank K or better (None without images)."""
    return {
        str(k): (sum(r is not None and r <= k for r in first.values()) / len(first) if first else None)
        for k in ks
    }


def false_composition(
    pair: ConceptPair,
    images: Sequence[int],
    generated: Generated,
    parsed: Mapping[str, frozenset[ConceptPair]],
    ks: Sequence[int],
) -> dict[str, float | None]:
    """Share of ``images`` (both constituents present, the pair not) whose top-K captions attach
    ``pair`` anyway, per K. ``parsed``: caption -> attached pairs."""
    return hit_rates(first_hits(pair, images, generated, parsed, max(ks, default=1)), ks)


def group_recall(
    pairs: Sequence[ConceptPair],
    images: Sequence[int],
    generated: Generated,
    references: Mapping[int, Sequence[str]],
    pairs_fn: PairsFn,
    ks: Sequence[int] = KS,
) -> dict[str, dict[str, Any]]:
    """Per pair label: ``{"images", "hits": {"1": n, ...}, "recall": {"1": r, ...}, "first_hit": {image:
    rank or None}}`` over one group's Test-Comb ``images`` (``first_hit``: the pair's evaluation images,
    ascending)."""
    report = recall_at_k(
        {i: generated[i] for i in images}, {i: references[i] for i in images}, pairs, pairs_fn, ks=ks
    )
    return {
        label: {
            "images": p.images,
            "hits": {str(k): p.hits[k] for k in ks},
            "recall": {str(k): p.recall[k] for k in ks},
            "first_hit": dict(sorted(p.first_rank.items())),
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
    group's Test-Comb images, as ``compcap-lab evaluate``."""
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
        empty = {
            "images": 0,
            "hits": {str(k): 0 for k in ks},
            "recall": {str(k): None for k in ks},
            "first_hit": {},
        }
        scored = (
            per_group[g]
            if own is None
            else group_recall([pair], own.get(pair.label, ()), generated, references, pairs_fn, ks)
        )
        stats = scored.get(pair.label, empty)
        images = sorted(no_comb.get(pair.label, ()))
        no_comb_first = first_hits(pair, images, generated, parsed, ks[-1])
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
                "false_composition": hit_rates(no_comb_first, (1, ks[-1])),
                "first_hit": {str(i): r for i, r in stats["first_hit"].items()},
                "no_comb_first_hit": {str(i): r for i, r in no_comb_first.items()},
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


PARTS = ("held_out", "seen", "all")


def part_rows(result: Mapping[str, Any], part: str) -> list[dict[str, Any]]:
    """The pair rows a summary (``held_out``, ``seen`` or ``all``) averages."""
    rows = list(result.get("pairs") or [])
    if part == "held_out":
        return [r for r in rows if r["held_out"]]
    if part == "seen":
        return [r for r in rows if not r["held_out"]]
    return rows


def with_intervals(result: dict[str, Any], seed: int = SEED) -> dict[str, Any]:
    """``result`` (``systematicity_result``'s) with a 95% interval beside every figure, from the
    per-image first hits it keeps: per pair ``recall_interval`` / ``false_composition_interval`` (a
    one-group bootstrap over its images); per summary ``recall_interval`` and ``per_category_interval``
    and overall ``false_composition_interval`` (a two-stage bootstrap over the pairs, then their
    images); ``intervals``: how they were drawn. In place; returned."""
    ks = [int(k) for k in result["ks"]]
    fc = [int(k) for k in result["false_composition"]]
    rows = result["pairs"]
    for row in rows:
        row["recall_interval"] = {str(k): interval([hits(row["first_hit"], k)], seed) for k in ks}
        row["false_composition_interval"] = {
            str(k): interval([hits(row["no_comb_first_hit"], k)], seed) for k in fc
        }
    for part in PARTS:
        summary = result.get(part)
        if summary is None:
            continue
        members = part_rows(result, part)
        summary["recall_interval"] = {
            str(k): interval([hits(r["first_hit"], k) for r in members], seed) for k in ks
        }
        summary["per_category_interval"] = {
            cat: {
                str(k): interval([hits(r["first_hit"], k) for r in members if r["category"] == cat], seed)
                for k in ks
            }
            for cat in summary.get("per_category") or {}
        }
    result["false_composition_interval"] = {
        str(k): interval([hits(r["no_comb_first_hit"], k) for r in rows], seed) for k in fc
    }
    result["intervals"] = method(seed)
    return result


def compare(a: Mapping[str, Any], b: Mapping[str, Any], seed: int = SEED) -> dict[str, Any]:
    """Paired tests of two systematicity results on the images both scored, figure name -> test of
    ``a`` − ``b``: ``<part>.recall_at_<K>`` for the held-out and seen summaries (the pairs held out, or
    seen, in both) and ``all``, and ``false_composition_at_<K>`` over every pair. Each pair keeps the
    images both results hold for it. ``ValueError`` naming why when the results share no pair or no
    image, or keep no per-image data."""
    for name, r in (("the first", a), ("the second", b)):
        if any("first_hit" not in row for row in r.get("pairs") or []):
            raise ValueError(f"{name} job's result keeps no per-image hits (it predates intervals)")
    rows_b = {r["pair"]: r for r in b.get("pairs") or []}
    both = [(r, rows_b[r["pair"]]) for r in a.get("pairs") or [] if r["pair"] in rows_b]
    if not both:
        raise ValueError("the two results share no pair")
    comb = [shared(ra["first_hit"], rb["first_hit"]) for ra, rb in both]
    no_comb = [shared(ra["no_comb_first_hit"], rb["no_comb_first_hit"]) for ra, rb in both]
    if not any(x for x, _ in comb) and not any(x for x, _ in no_comb):
        raise ValueError("the two results share no image: probe the same probe set with the same images")
    ks = [int(k) for k in a["ks"] if k in b["ks"]]
    known = bool(a.get("held_out_known", True)) and bool(b.get("held_out_known", True))
    parts: dict[str, list[int]] = {}
    if known:
        parts["held_out"] = [n for n, (ra, rb) in enumerate(both) if ra["held_out"] and rb["held_out"]]
        parts["seen"] = [n for n, (ra, rb) in enumerate(both) if not ra["held_out"] and not rb["held_out"]]
    parts["all"] = list(range(len(both)))
    figures: dict[str, Any] = {}
    for part, members in parts.items():
        for k in ks:
            figures[f"{part}.recall_at_{k}"] = paired(
                [hits(comb[n][0], k) for n in members], [hits(comb[n][1], k) for n in members], seed
            )
    for k in sorted({1, ks[-1]}) if ks else [1]:
        figures[f"false_composition_at_{k}"] = paired(
            [hits(x, k) for x, _ in no_comb], [hits(y, k) for _, y in no_comb], seed
        )
    return {"figures": figures, "intervals": method(seed)}


__all__ = [
    "KS",
    "PARTS",
    "compare",
    "false_composition",
    "first_hits",
    "group_recall",
    "hit_rates",
    "part_rows",
    "summarise",
    "systematicity_result",
    "with_intervals",
]
