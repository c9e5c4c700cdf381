"""``compcap-lab compositional --evaluate``: the compositional rankers (``comp_g<group>``: VSE++ trained with
SceneWorld's counterfactual hard negatives, ``compcap_lab.pipeline.compositional_rankers``) evaluated
exactly as the reproduction evaluates its control rows (``report.collect``): on the zoo's evaluation world,
BUTD's B = 100 beams re-ranked by a ranker with the reproduction's weight λ (ranker cosine + λ ×
normalised log-prob), beam 5 for the plain rows, Recall@K of the held-out pairs on Test Comb.

Rows, per held-out group: BUTD (beam 5), BUTD+VSE++ (its beams re-ranked by the group's VSE++, the
control), BUTD+comp (by the compositional ranker), BUTR+RR (BUTR's beams re-ranked by its own head); for
the group trained on more seeds, BUTD+comp seed N (``comp_g<group>_seed<N>``). Per row: held-out
Recall@1 and @5 with their 95% intervals (``uncertainty.row_strata``, ``stratified_interval``: pairs
within each group, images within a pair), per group and pooled; seen-pair Recall@5 — the other groups'
pairs, which this group's models trained on, on this group's Test no Comb images (its split with those
pairs as ``pairs``) — with its interval; CIDEr-D on Test no Comb and its ratio to BUTD's. Paired tests on
the same (pair, image) cases from the first ranks each evaluation stores (``uncertainty.paired_tests``):
BUTD+comp against BUTD+VSE++ and against BUTR+RR per group and pooled over the groups (every group's
pairs; the interval resamples the pairs as clusters, then their images), each seed's BUTD+comp against
BUTD+VSE++ and the seeds pooled (``seeds.pooled_tests``: the pairs they share as clusters); Holm over
that family (``family.holm``). The beam ceiling: BUTD decoded with 100 beams in log-prob order, the
first of the 100 captions mentioning each held-out (pair, image) case — no re-ranker of those beams can
hit a case the beams lack. The targets, each with its interval and its verdict.

``compositional.json`` holds the per (pair, image) first ranks (``data``: the report's collected shape,
trimmed) and every figure the Markdown prints; ``markdown`` renders from it alone, ``analyse`` recomputes
the figures from ``data`` (``reanalyse``: the JSON and Markdown again, no model, no data), and
``compositional.png`` plots held-out Recall@5 per row, per group and pooled.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compcap_lab.studies.report.collect import collect, mean_of
from compcap_lab.studies.report.family import holm_texts, holm_verdict, p_phrase, verdict
from compcap_lab.studies.report.markdown import floor_note
from compcap_lab.studies.report.uncertainty import (
    PAIRED_METHOD,
    cell,
    difference_text,
    family,
    paired_tests,
    row_strata,
)
from compcap_lab.studies.seeds import POOLED_METHOD, interval_plot, pooled_tests
from service.evaluation.intervals import binary_units, stratified_interval
from service.evaluation.recall import PairsFn

BUTD, VSEPP, COMP, RR = "BUTD", "BUTD+VSE++", "BUTD+comp", "BUTR+RR"
# (row, captioner prefix, ranker prefix): each group's rows, in the table's order
SPECS = ((BUTD, "butd", None), (VSEPP, "butd", "vsepp"), (COMP, "butd", "comp"), (RR, "butr", "butr"))
COMPARE = ((COMP, VSEPP), (COMP, RR))  # per group and pooled over the groups
BEAMS = 100  # B: the re-ranked beams, and the beams the ceiling looks through
RECALL_TARGET = 0.165  # held-out Recall@5 of BUTD+comp
CIDER_TOLERANCE = 0.10  # CIDEr-D within 10% of BUTD's
SEEDS_WANTED = 3  # training seeds of the seeds target
ZOO_SEED = "zoo"  # comp_g<group>: trained from the zoo's VSE++ seed
SEEN = (
    "Seen pairs: for each group, the held-out pairs of the other groups — pairs its captioners and rankers "
    "trained on — scored on the group's Test no Comb images (no held-out pair there), as Recall@5 of the "
    "held-out pairs is scored on Test Comb."
)
CEILING = (
    "Beam ceiling: BUTD decoded with {beams} beams in log-prob order, and for each held-out (pair, image) "
    "case the first of the {beams} captions that mentions the pair. A re-ranker of these beams puts 5 of "
    "them first, so it cannot hit a case none of them mentions: Recall@{beams} of the beams (pairs within "
    "each group, images within a pair, as Recall@5) bounds every re-ranked row's Recall@5."
)


def seed_row(seed: str) -> str:
    """The table row of BUTD re-ranked by ``comp_g<group>_seed<seed>``."""
    return f"{COMP} seed {seed}"


def table_rows(
    captioners: set[str], rankers: set[str], groups: Sequence[int], seeds_group: int = 1
) -> dict[str, list[tuple[int, str, str | None]]]:
    """Row → [(group, captioner, ranker)] for the groups a repository (its ``captioners`` and ``rankers``)
    has the models of: ``SPECS``' rows, then BUTD re-ranked by each ``comp_g<seeds_group>_seed<N>``."""
    rows: dict[str, list[tuple[int, str, str | None]]] = {}
    for label, cap, ranker in SPECS:
        rows[label] = [
            (g, f"{cap}_g{g}", f"{ranker}_g{g}" if ranker else None)
            for g in groups
            if f"{cap}_g{g}" in captioners and (ranker is None or f"{ranker}_g{g}" in rankers)
        ]
    prefix = f"comp_g{seeds_group}_seed"
    seeds = sorted((r[len(prefix) :] for r in rankers if r.startswith(prefix)), key=lambda s: (len(s), s))
    if seeds_group in groups and f"butd_g{seeds_group}" in captioners:
        for s in seeds:
            rows[seed_row(s)] = [(seeds_group, f"butd_g{seeds_group}", prefix + s)]
    return {k: v for k, v in rows.items() if v}


def seen_pairs(group: int) -> list[Any]:
    """The held-out pairs of every group but ``group`` (``ConceptPair``): pairs ``group``'s models saw."""
    from service.text.concepts import load_concepts

    return [p for h, pairs in enumerate(load_concepts().pair_groups, 1) if h != group for p in pairs]


def seen_split(data: Path, group: int, folder: Path) -> Path:
    """``group``'s split of ``data`` with the seen pairs (``seen_pairs``) as its pairs, written under
    ``folder``: evaluating its Test no Comb scores their Recall@K there."""
    from export.data.splits import Split, load_split, split_path_for, write_split

    split = load_split(split_path_for(data, "systematicity", group))
    seen = Split(split.kind, split.group, seen_pairs(group), split.sets, {"seen_pairs_of": group})
    return write_split(seen, folder / f"seen_{group}")


async def _beams(repo: Path, images: Any, captioner: str, beams: int) -> list[list[str]]:
    from compcap_lab.studies.runs import run_options
    from export.packaging.decoding import decode, open_engine

    async with await open_engine(repo, max_beam_size=beams) as engine:
        params = engine.resolve(model=captioner, **run_options(None, beams, beams, 0.0))
        found = await decode(engine, images, params, f"decode {captioner}, {beams} beams")
    return [[c.text for c in per] for per in found]


def beam_ranks(
    repo: Path, data: Path, group: int, captioner: str, beams: int = BEAMS, pairs_fn: PairsFn | None = None
) -> dict[str, Any]:
    """``captioner``'s ``beams`` beams (log-prob order) on ``group``'s Test Comb: per held-out pair its
    category, images and, per image, the first of the beams that mentions the pair (None: none does)."""
    from compcap_lab.studies.evaluate import load_images
    from export.data.coco_captions import load_folder
    from export.data.splits import load_split, split_path_for
    from service.evaluation.recall import CachedPairs, recall_at_k
    from service.manifest import load_manifest

    split = load_split(split_path_for(data, "systematicity", group))
    dataset = load_folder(data)
    ids = [int(i) for i in split.sets["test"]]
    image = load_manifest(repo).image
    names = [dataset.file_names[i] for i in ids]
    texts = asyncio.run(
        _beams(repo, load_images(Path(dataset.root), names, image.height, image.width), captioner, beams)
    )
    if pairs_fn is None:
        from service.text.attachment import AttachmentChecker

        pairs_fn = AttachmentChecker().pairs_batch
    references = {i: list(dataset.captions[i]) for i in ids}
    found = recall_at_k(
        dict(zip(ids, texts, strict=True)), references, split.pairs, CachedPairs(pairs_fn), ks=(beams,)
    )
    return {
        label: {
            "category": p.category,
            "images": p.images,
            "first_rank": {str(i): r for i, r in p.first_rank.items()},
        }
        for label, p in found.per_pair.items()
    }


PAIR_KEYS = ("kind", "modifier", "noun", "category", "images", "hits", "first_rank")
RESULT_KEYS = (
    "captioner",
    "ranker",
    "recall_at_k",
    "recall_at_5_mean",
    "bleu4",
    "meteor",
    "rouge_l",
    "cider_d",
)


def trimmed(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An evaluation (``compcap_lab.studies.evaluate``) cut to what this report reads: its settings, and per
    run the scores and per pair its counts and per-image first ranks."""
    out = {k: v for k, v in evaluation.items() if k != "results"}
    out["results"] = [
        {
            **{k: r.get(k) for k in RESULT_KEYS},
            "per_pair": {
                label: {k: p[k] for k in PAIR_KEYS if k in p}
                for label, p in (r.get("per_pair") or {}).items()
            },
        }
        for r in evaluation["results"]
    ]
    return out


def _view(data: dict[str, Any], set_name: str, group: int | None = None) -> dict[str, Any]:
    """``data`` as ``uncertainty`` reads it (its Test Comb as ``group<g>/test``): Test Comb's held-out pairs
    (``set_name`` "test") or Test no Comb's seen pairs ("test_no_comb"); one group's rows, or all."""
    rows = {
        label: [e for e in entries if group is None or e[0] == group]
        for label, entries in data["rows"].items()
    }
    raw = {
        k.replace(f"/{set_name}", "/test"): v for k, v in data["raw"].items() if k.endswith(f"/{set_name}")
    }
    return {"rows": {k: v for k, v in rows.items() if v}, "raw": raw}


def _interval(strata: list[list[list[float]]]) -> dict[str, Any] | None:
    found = stratified_interval(strata)
    return None if found is None else found.as_dict()


def _recall(view: dict[str, Any], ks: str) -> dict[str, Any]:
    """Per row: Recall@K for K in ``ks`` with its interval, pooled over its groups, and Recall@5 per group."""
    out: dict[str, Any] = {}
    for label, entries in view["rows"].items():
        strata = row_strata(view, label)
        out[label] = {f"recall_at_{k}": _interval(row_strata(view, label, k)) for k in ks}
        out[label]["by_group"] = {
            str(g): _interval([s]) for (g, _, _), s in zip(entries, strata, strict=True)
        }
    return out


def _quality(data: dict[str, Any]) -> dict[str, Any]:
    """Per row: in-distribution (Test no Comb) CIDEr-D and BLEU-4, the mean over its groups, per group, and
    CIDEr-D over BUTD's on the same groups."""

    def scores(label: str, metric: str) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for g, cap, ranker in data["rows"].get(label, []):
            for r in data["raw"][f"group{g}/test_no_comb"]["results"]:
                if r["captioner"] == cap and r["ranker"] == ranker:
                    out[str(g)] = r[metric]
        return out

    butd = scores(BUTD, "cider_d")
    table: dict[str, Any] = {}
    for label in data["rows"]:
        cider = scores(label, "cider_d")
        mean = mean_of(list(cider.values()))
        base = mean_of([butd.get(g) for g in cider])
        table[label] = {
            "cider_d": mean,
            "cider_d_by_group": cider,
            "bleu4": mean_of(list(scores(label, "bleu4").values())),
            "cider_d_vs_butd": mean / base if mean is not None and base else None,
        }
    return table


def _ceiling(data: dict[str, Any], beams: int) -> dict[str, Any]:
    """From the beams' first ranks (``data["beams"]``): per group and pooled, the held-out (pair, image)
    cases, how many have the pair in the beams, their share, and Recall@beams with its interval; and, per
    BUTD re-ranked row, its hits at 5 on cases the beams lack (0 when the beams are those it re-ranked)."""
    per_group: dict[str, Any] = {}
    strata: list[list[list[float]]] = []
    for key, per_pair in data["beams"].items():
        inside = [
            sum(1 for r in p["first_rank"].values() if r is not None and r <= beams)
            for p in per_pair.values()
        ]
        units = [
            binary_units(n, len(p["first_rank"])) for n, p in zip(inside, per_pair.values(), strict=True)
        ]
        strata.append(units)
        cases = sum(len(u) for u in units)
        per_group[key.removeprefix("group")] = {
            "cases": cases,
            "in_beams": sum(inside),
            "share": sum(inside) / cases if cases else None,
            "recall": _interval([units]),
        }
    cases = sum(g["cases"] for g in per_group.values())
    inside_all = sum(g["in_beams"] for g in per_group.values())
    outside: dict[str, int] = {}
    for label, entries in data["rows"].items():
        for g, cap, ranker in entries:
            beam = data["beams"].get(f"group{g}")
            if ranker is None or beam is None or not cap.startswith("butd_"):
                continue
            for r in data["raw"][f"group{g}/test"]["results"]:
                if r["captioner"] == cap and r["ranker"] == ranker:
                    outside[label] = outside.get(label, 0) + sum(
                        1
                        for pair, p in (r.get("per_pair") or {}).items()
                        for image, rank in (p.get("first_rank") or {}).items()
                        if rank is not None and rank <= 5 and beam[pair]["first_rank"].get(image) is None
                    )
    return {
        "beams": beams,
        "by_group": per_group,
        "pooled": {
            "cases": cases,
            "in_beams": inside_all,
            "share": inside_all / cases if cases else None,
            "recall": _interval(strata),
        },
        "hits_outside_beams": outside,
    }


def _seed_tests(data: dict[str, Any], group: int) -> dict[str, Any]:
    """Each training seed's BUTD+comp against BUTD+VSE++ on ``group`` (the zoo's seed: the group's own
    test), and the seeds pooled with the pairs they share as clusters (``seeds.pooled_tests``)."""
    labels = {ZOO_SEED: COMP}
    labels |= {
        label.removeprefix(f"{COMP} seed "): label
        for label in data["rows"]
        if label.startswith(f"{COMP} seed ")
    }
    if len(labels) < 2:
        return {}
    view = _view(data, "test", group)
    views = []
    for label in labels.values():
        if label in view["rows"] and VSEPP in view["rows"]:
            views.append(
                {"rows": {COMP: view["rows"][label], VSEPP: view["rows"][VSEPP]}, "raw": view["raw"]}
            )
    tests = {
        seed: paired_tests(view, [(label, VSEPP)]).get(f"{label} vs {VSEPP}")
        for seed, label in labels.items()
    }
    pooled = (
        pooled_tests(views, [(COMP, VSEPP)]).get(f"{COMP} vs {VSEPP}") if len(views) == len(labels) else None
    )
    return {"group": group, "rows": labels, "tests": tests, "pooled": pooled}


def family_name(where: str, a: str, b: str) -> str:
    """A paired test's name in the family: "group 1: a vs b", "pooled: a vs b", "seed 2: a vs b"."""
    return f"{where}: {a} vs {b}"


def family_tests(report: dict[str, Any]) -> dict[str, Any]:
    """The family whose verdicts the report states: BUTD+comp against BUTD+VSE++ and BUTR+RR per group and
    pooled over the groups; each further training seed's BUTD+comp against BUTD+VSE++ (the zoo's seed's
    is its group's test), and the seeds pooled."""
    tests: dict[str, Any] = {}
    for where, found in report["paired"].items():
        for name, test in found.items():
            tests[f"{where}: {name}"] = test
    seeds = report.get("seeds") or {}
    for seed, test in (seeds.get("tests") or {}).items():
        if seed != ZOO_SEED and test is not None:
            tests[family_name(f"seed {seed}", COMP, VSEPP)] = test
    if seeds.get("pooled") is not None:
        tests[family_name("pooled over seeds", COMP, VSEPP)] = seeds["pooled"]
    return tests


def _mark(met: bool, point: bool | None = None) -> str:
    if met:
        return "met"
    return "met by the point estimate only" if point else "not met"


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets, each with what it measures, its interval where it has one, whether it is met and by how
    much it misses (``verdict``: "met", "met by the point estimate only" where the interval does not
    clear it, or "not met")."""
    out: list[dict[str, Any]] = []
    held = (report["held_out"].get(COMP) or {}).get("recall_at_5")
    if held:
        met, point = held["low"] >= RECALL_TARGET, held["estimate"] >= RECALL_TARGET
        out.append(
            {
                "target": "recall",
                "what": f"held-out Recall@5 of BUTD+comp ≥ {100 * RECALL_TARGET:g}",
                "threshold": RECALL_TARGET,
                "interval": held,
                "gap": held["estimate"] - RECALL_TARGET,
                "ceiling": (report["ceiling"]["pooled"].get("recall") if report.get("ceiling") else None),
                "verdict": _mark(met, point),
            }
        )
    pooled = report["paired"].get("pooled", {}).get(f"{COMP} vs {VSEPP}")
    if pooled:
        adjusted = report["family"]["p_holm"][family_name("pooled", COMP, VSEPP)]
        after = holm_verdict(pooled, adjusted)
        out.append(
            {
                "target": "paired",
                "what": "BUTD+comp − BUTD+VSE++ held-out Recall@5 over the groups: 95% interval above 0 and "
                "Holm-adjusted p < 0.05",
                "test": pooled,
                "p_holm": adjusted,
                "holm_verdict": after,
                "gap": pooled["difference"]["low"],
                "verdict": _mark(after == "higher"),
            }
        )
    seeds = report.get("seeds") or {}
    if seeds:
        signs = {s: (t["difference"]["estimate"] if t else None) for s, t in seeds["tests"].items()}
        positive = [s for s, d in signs.items() if d is not None and d > 0]
        out.append(
            {
                "target": "seeds",
                "what": f"BUTD+comp − BUTD+VSE++ above 0 on each of {SEEDS_WANTED} training seeds (group "
                f"{seeds['group']})",
                "estimates": signs,
                "positive": len(positive),
                "seeds": len(signs),
                "verdict": _mark(len(positive) == len(signs) >= SEEDS_WANTED),
            }
        )
    quality = report["quality"]
    comp, butd = (quality.get(COMP) or {}).get("cider_d"), (quality.get(BUTD) or {}).get("cider_d")
    if comp is not None and butd:
        gap = comp / butd - 1
        out.append(
            {
                "target": "cider",
                "what": f"BUTD+comp in-distribution CIDEr-D within {100 * CIDER_TOLERANCE:g}% of BUTD's",
                "cider_d": comp,
                "butd": butd,
                "gap": gap,
                "verdict": _mark(abs(gap) <= CIDER_TOLERANCE),
            }
        )
    seen = report["seen_paired"].get(f"{COMP} vs {VSEPP}")
    if seen:
        out.append(
            {
                "target": "seen",
                "what": "seen-pair Recall@5 of BUTD+comp not below BUTD+VSE++'s (the difference's 95% "
                "interval includes or exceeds 0)",
                "test": seen,
                "gap": seen["difference"]["high"],
                "verdict": _mark(seen["difference"]["high"] >= 0),
            }
        )
    return out


METHOD = (
    "Recall@K: the mean over the held-out groups of the mean over each group's held-out pairs of the share "
    "of the pair's Test Comb images whose top K captions mention it; 95% percentile bootstrap (2000 "
    "resamples, seed 0), pairs resampled within each group, images within a drawn pair."
)


def analyse(data: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """``compositional.json`` from ``data`` — {"rows": row → [(group, captioner, ranker)], "raw":
    "group<g>/test" (held-out pairs) and "group<g>/test_no_comb" (seen pairs) → ``trimmed`` evaluations,
    "beams": "group<g>" → ``beam_ranks``} — and ``meta`` (repo, eval_data, rerank_weight, ...)."""
    held, seen = _view(data, "test"), _view(data, "test_no_comb")
    groups = sorted({int(e[0]) for entries in data["rows"].values() for e in entries})
    paired = {f"group {g}": paired_tests(_view(data, "test", g), COMPARE) for g in groups}
    paired["pooled"] = paired_tests(held, COMPARE)
    report: dict[str, Any] = {
        **meta,
        "groups": groups,
        "method": METHOD,
        "paired_method": PAIRED_METHOD,
        "seen_method": SEEN,
        "held_out": _recall(held, "15"),
        "seen": _recall(seen, "5"),
        "quality": _quality(data),
        "paired": {k: v for k, v in paired.items() if v},
        "seen_paired": paired_tests(seen, [(COMP, VSEPP)]),
        "ceiling": _ceiling(data, int(meta.get("rerank_beam", BEAMS))) if data.get("beams") else None,
    }
    seeds_group = meta.get("seeds_group")
    report["seeds"] = _seed_tests(data, int(seeds_group)) if seeds_group in groups else {}
    report["family"] = family(family_tests(report), "BUTD+comp's paired tests: per group, pooled, per seed")
    report["targets"] = targets(report)
    report["data"] = data
    return report


def _diff(test: dict[str, Any] | None, holm: str | None = None) -> str:
    if not test:
        return "—"
    adjusted = f", Holm {holm}" if holm is not None else ""
    return f"{difference_text(test['difference'])}, {p_phrase(test)}{adjusted}"


def _iv(found: dict[str, Any] | None) -> str:
    return cell(found["estimate"], found) if found else "—"


def _target_line(t: dict[str, Any], holm: dict[str, str]) -> str:
    if t["target"] == "recall":
        ceiling = t.get("ceiling")
        said = f"{_iv(t['interval'])}; {100 * t['gap']:+.1f} points from {100 * t['threshold']:g}"
        if ceiling:
            said += f"; ceiling of BUTD's beams {_iv(ceiling)}"
        return said
    if t["target"] == "paired":
        return f"{_diff(t['test'], holm[family_name('pooled', COMP, VSEPP)])}; after Holm {t['holm_verdict']}"
    if t["target"] == "seeds":
        per = ", ".join(
            f"{'zoo seed' if s == ZOO_SEED else f'seed {s}'} {'—' if d is None else f'{100 * d:+.1f}'}"
            for s, d in t["estimates"].items()
        )
        return f"{t['positive']} of {t['seeds']} seeds above 0 ({per})"
    if t["target"] == "cider":
        return f"{100 * t['cider_d']:.1f} vs BUTD {100 * t['butd']:.1f} ({100 * t['gap']:+.1f}%; no interval)"
    return f"{difference_text(t['test']['difference'])}, {p_phrase(t['test'])}"


def _missed(t: dict[str, Any]) -> str | None:
    """By how much a target is missed, in words (None when met)."""
    if t["verdict"] == "met":
        return None
    if t["target"] == "recall":
        if t["gap"] >= 0:
            text = f"held-out Recall@5 reaches {100 * t['threshold']:g}, its interval's lower bound does not"
        else:
            text = f"held-out Recall@5 is {100 * -t['gap']:.1f} points short of {100 * t['threshold']:g}"
        ceiling = t.get("ceiling")
        if ceiling:
            reach = "above" if ceiling["estimate"] >= t["threshold"] else "below"
            text += (
                f"; the beam ceiling, the most any re-ranker of BUTD's 100 beams could reach, is "
                f"{_iv(ceiling)}, {reach} the target"
            )
        return text + "."
    if t["target"] == "paired":
        d = t["test"]["difference"]
        return (
            f"the pooled difference is {100 * d['estimate']:+.1f} points, its interval's lower bound "
            f"{100 * d['low']:+.1f}; after Holm: {t['holm_verdict']}."
        )
    if t["target"] == "seeds":
        return f"{t['seeds'] - t['positive']} of {t['seeds']} seeds are not above 0" + (
            f", and {t['seeds']} seeds are fewer than {SEEDS_WANTED}." if t["seeds"] < SEEDS_WANTED else "."
        )
    if t["target"] == "cider":
        return (
            f"CIDEr-D is {100 * t['gap']:+.1f}% from BUTD's, {100 * (abs(t['gap']) - CIDER_TOLERANCE):.1f} "
            f"percentage points beyond the {100 * CIDER_TOLERANCE:g}% allowed."
        )
    return f"the interval's upper bound is {100 * t['gap']:+.1f} points: seen-pair Recall@5 is lower."


def markdown(report: dict[str, Any]) -> str:
    """``compositional.md`` from ``compositional.json``."""
    groups = [str(g) for g in report["groups"]]
    tests = family_tests(report)
    holm = holm_texts(tests)
    adjusted = report["family"]["p_holm"]
    rows = list(report["held_out"])
    lines = [
        "# Compositional rankers: BUTD's beams re-ranked by VSE++ trained with counterfactual negatives",
        "",
        f"Repository `{report['repo']}`, evaluation world `{report['eval_data']}`. BUTD decodes B = "
        f"{report['rerank_beam']} beams and a ranker orders them by cosine + {report['rerank_weight']:g} × "
        f"normalised log-prob (λ from {report.get('rerank_weight_source', '—')}), exactly as the "
        "reproduction's control rows; plain rows decode beam 5. BUTD+VSE++: re-ranked by the group's "
        "VSE++; BUTD+comp: by the VSE++ trained with SceneWorld's counterfactual hard negatives from the "
        "same seed; BUTR+RR: BUTR's beams re-ranked by its own head. Generated by `compcap-lab "
        "compositional --evaluate`.",
        "",
        "## Targets",
        "",
        "A target on a mean is met when its 95% interval clears the threshold (“met by the point "
        "estimate only” when only the estimate does); the paired target by its verdict after Holm; "
        "CIDEr-D is a corpus figure whose per-image scores are not stored, so it has no interval.",
        "",
        "| target | measured [95% interval] | verdict |",
        "|---|---|---|",
    ]
    for t in report["targets"]:
        lines.append(f"| {t['what']} | {_target_line(t, holm)} | {t['verdict']} |")
    missed = [m for m in (_missed(t) for t in report["targets"]) if m]
    if missed:
        lines += ["", "Missed: " + " ".join(m[0].upper() + m[1:] for m in missed)]
    lines += [
        "",
        "## Recall of the held-out pairs (Test Comb), seen pairs (Test no Comb) and CIDEr-D (×100)",
        "",
        report["method"] + " " + report["seen_method"],
        "",
        "| row | R@1 | R@5 | "
        + " | ".join(f"R@5 group {g}" for g in groups)
        + " | seen-pair R@5 | CIDEr-D (no comb) | CIDEr-D / BUTD |",
        "|---" * (len(groups) + 6) + "|",
    ]
    for label in rows:
        held, seen = report["held_out"][label], report["seen"].get(label) or {}
        q = report["quality"].get(label) or {}
        ratio = q.get("cider_d_vs_butd")
        lines.append(
            f"| {label} | {_iv(held['recall_at_1'])} | {_iv(held['recall_at_5'])} | "
            + " | ".join(_iv(held["by_group"].get(g)) for g in groups)
            + f" | {_iv(seen.get('recall_at_5'))} | "
            + ("—" if q.get("cider_d") is None else f"{100 * q['cider_d']:.1f}")
            + " | "
            + ("—" if ratio is None else f"{ratio:.3f}")
            + " |"
        )
    lines += [
        "",
        "## Paired tests (difference a − b in mean Recall@5 ×100, 95% interval, p-value, Holm-adjusted p)",
        "",
        report["paired_method"]
        + " Pooled: every group's held-out pairs at once; the pairs are the clusters the interval resamples.",
        "",
        "| comparison | " + " | ".join(report["paired"]) + " |",
        "|---" * (len(report["paired"]) + 1) + "|",
    ]
    for a, b in COMPARE:
        name = f"{a} vs {b}"
        cells = [
            _diff(found.get(name), holm.get(f"{where}: {name}")) for where, found in report["paired"].items()
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    seen_test = report["seen_paired"].get(f"{COMP} vs {VSEPP}")
    if seen_test:
        lines += [
            "",
            f"Seen pairs, pooled over the groups: BUTD+comp − BUTD+VSE++ = {_diff(seen_test)} (a target "
            "judged on its interval, not in the family).",
        ]
    seeds = report.get("seeds") or {}
    if seeds:
        lines += [
            "",
            f"## Training seeds (group {seeds['group']}): BUTD+comp − BUTD+VSE++",
            "",
            "Each ranker against the group's one VSE++ on the same cases; the zoo's seed is the group's "
            "test above. " + POOLED_METHOD,
            "",
            "| seed | row | R@5 | BUTD+comp − BUTD+VSE++ | verdict (after Holm) |",
            "|---|---|---|---|---|",
        ]
        for seed, label in seeds["rows"].items():
            test = seeds["tests"].get(seed)
            name = (
                family_name(f"group {seeds['group']}", COMP, VSEPP)
                if seed == ZOO_SEED
                else family_name(f"seed {seed}", COMP, VSEPP)
            )
            found = report["held_out"].get(label, {}).get("by_group", {}).get(str(seeds["group"]))
            said = f"{verdict(test)} ({holm_verdict(test, adjusted[name])})" if test else "—"
            lines.append(
                f"| {'zoo' if seed == ZOO_SEED else seed} | {label} | {_iv(found)} | "
                f"{_diff(test, holm.get(name))} | {said} |"
            )
        if seeds.get("pooled"):
            name = family_name("pooled over seeds", COMP, VSEPP)
            lines.append(
                f"| pooled | — | — | {_diff(seeds['pooled'], holm[name])} | {verdict(seeds['pooled'])} "
                f"({holm_verdict(seeds['pooled'], adjusted[name])}) |"
            )
    ceiling = report.get("ceiling")
    if ceiling:
        beams = ceiling["beams"]
        lines += [
            "",
            f"## The beam ceiling: how often BUTD's {beams} beams mention the held-out pair at all",
            "",
            CEILING.format(beams=beams),
            "",
            f"| group | (pair, image) cases | with the pair in the {beams} beams | share | Recall@{beams} |",
            "|---|---|---|---|---|",
        ]
        for g, found in [*ceiling["by_group"].items(), ("pooled", ceiling["pooled"])]:
            share = "—" if found["share"] is None else f"{100 * found['share']:.1f}%"
            lines.append(
                f"| {g} | {found['cases']} | {found['in_beams']} | {share} | {_iv(found['recall'])} |"
            )
        outside = {k: v for k, v in ceiling["hits_outside_beams"].items() if v}
        lines += [
            "",
            "Every hit at 5 of a BUTD re-ranked row is a case these beams mention: they are the beams the "
            "rankers re-ordered."
            if not outside
            else "Hits at 5 of a BUTD re-ranked row on cases these beams lack — so they are not exactly the "
            "beams the rankers re-ordered: " + ", ".join(f"{k} {v}" for k, v in outside.items()) + ".",
        ]
    permutations = max((int(t.get("permutations") or 10_000) for t in tests.values()), default=10_000)
    lines += [
        "",
        "## What this supports",
        "",
        f"The family: the {len(tests)} paired tests above ({report['family']['what']}). Holm–Bonferroni over "
        "it keeps the chance of any false “higher” or “lower” among them at 5%, whatever their dependence; "
        "the verdict after Holm reads the adjusted p-value by the same rule. " + floor_note(permutations),
        "",
        "At the 5% level: higher / lower when the interval excludes 0 and p < 0.05; mixed when only one "
        "does (the permutation test takes the pairs as given, the interval resamples them); not significant "
        "when neither; after Holm, the same rule on the adjusted p-value.",
        "",
    ]
    for name, test in tests.items():
        after = holm_verdict(test, adjusted[name])
        lines.append(f"- {name}: {verdict(test)} ({_diff(test, holm[name])}); after Holm {after}.")
    lines += ["", "![Held-out Recall@5 per row and group](compositional.png)", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Held-out Recall@5 per row: pooled over the groups as a bar with its interval, each group's a point
    with its interval; the target and the beam ceiling as dashed lines."""
    labels = [label for label in report["held_out"] if not label.startswith(f"{COMP} seed ")]
    pooled = {label: report["held_out"][label]["recall_at_5"] for label in labels}
    series = {
        f"group {g} (95% interval)": {
            label: report["held_out"][label]["by_group"].get(str(g)) for label in labels
        }
        for g in report["groups"]
    }
    lines = [(RECALL_TARGET, f"target {100 * RECALL_TARGET:g}")]
    ceiling = (report.get("ceiling") or {}).get("pooled", {}).get("recall")
    if ceiling:
        lines.append((ceiling["estimate"], f"beam ceiling (R@{report['ceiling']['beams']})"))
    interval_plot(
        path,
        labels,
        {label: iv["estimate"] for label, iv in pooled.items() if iv},
        "pooled over groups (95% interval)",
        {name: {k: v for k, v in rows.items() if v} for name, rows in series.items()},
        "Compositional rankers: BUTD's beams re-ranked, per held-out group",
        bar_intervals={label: iv for label, iv in pooled.items() if iv},
        lines=lines,
    )


def write(out: Path, report: dict[str, Any]) -> None:
    """``compositional.json``, ``compositional.md`` and ``compositional.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "compositional.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "compositional.md").write_text(markdown(report), encoding="utf-8")
    plot(report, out / "compositional.png")


META = ("repo", "zoo", "eval_data", "rerank_weight", "rerank_weight_source", "rerank_beam", "seeds_group")


def reanalyse(out: Path) -> dict[str, Any]:
    """Recompute ``compositional.json`` (and its Markdown and plot) in ``out`` from the first ranks it
    stores, without the models or the data."""
    old = json.loads((out / "compositional.json").read_text(encoding="utf-8"))
    report = analyse(old["data"], {k: old[k] for k in META if k in old})
    write(out, report)
    return report


def reproduction_weight(report: Path) -> tuple[float, str] | None:
    """λ as the reproduction chose it (``rerank.weight`` of ``reproduction.json``, as ``compcap-lab seeds``
    reads it) in the report folder or the folder above it, and that file; None when neither has it."""
    for folder in (report, report.parent):
        path = folder / "reproduction.json"
        if path.is_file():
            weight = (json.loads(path.read_text(encoding="utf-8")).get("rerank") or {}).get("weight")
            if weight is not None:
                return float(weight), str(path)
    return None


def evaluate_compositional(
    repo: Path,
    data: Path,
    groups: Sequence[int],
    out: Path,
    rerank_weight: float,
    weight_source: str = "--rerank-weight",
    seeds_group: int = 1,
    zoo: Path | None = None,
    pairs_fn: PairsFn | None = None,
    meteor: bool = True,
) -> dict[str, Any]:
    """Evaluate the rows (``table_rows``) of each group of ``repo`` on ``data`` with ``collect`` (B = 100,
    ``rerank_weight``; Test no Comb on the seen-pair split, ``seen_split``), decode the beam ceiling
    (``beam_ranks``), write the report (``write``; the evaluations under ``out/compositional/``) and return
    it. ``pairs_fn``, ``meteor``: as ``compcap_lab.studies.evaluate.evaluate``'s."""
    from service.manifest import load_manifest

    manifest = load_manifest(repo)
    captioners = {c.name for c in manifest.captioners}
    rows = table_rows(captioners, {r.name for r in manifest.rankers}, groups, seeds_group)
    folder = Path(out) / "compositional"
    seen = {g: seen_split(Path(data), g, folder / "splits") for g in groups}

    def split_file(group: int, set_name: str) -> Path | None:
        return seen[group] if set_name == "test_no_comb" else None

    collected = collect(
        repo,
        data,
        groups,
        folder,
        rerank_weight,
        rows=rows,
        split_file=split_file,
        pairs_fn=pairs_fn,
        meteor=meteor,
    )
    beams = {
        f"group{g}": beam_ranks(repo, data, g, f"butd_g{g}", BEAMS, pairs_fn)
        for g in groups
        if f"butd_g{g}" in captioners
    }
    data_ = {
        "rows": collected["rows"],
        "raw": {k: trimmed(v) for k, v in collected["raw"].items()},
        "beams": beams,
    }
    meta = {
        "repo": str(repo),
        "zoo": None if zoo is None else str(zoo),
        "eval_data": str(data),
        "rerank_weight": rerank_weight,
        "rerank_weight_source": weight_source,
        "rerank_beam": BEAMS,
        "seeds_group": seeds_group,
    }
    report = analyse(data_, meta)
    write(Path(out), report)
    return report


__all__ = [
    "analyse",
    "evaluate_compositional",
    "markdown",
    "reanalyse",
    "reproduction_weight",
    "table_rows",
    "targets",
]
