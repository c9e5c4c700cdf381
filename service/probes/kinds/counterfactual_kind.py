"""The counterfactual probe: minimal pairs of SceneWorld scenes that differ in exactly one
object's held-out attribute or action; hit rates of the held-out and the seen side, every top-1 miss
classified by the scene graph, held-out − seen as a paired test, all with 95% intervals. The maths is
``service.probes.scoring.counterfactual``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from service.probes.kinds.bounds import BoundedGauge, latest_gauge
from service.probes.kinds.record import KindRun, decode, module_kind, pairs_check, pairs_details
from service.probes.kinds.tables import cell, fixed, get, table, with_bounds
from service.probes.kinds.view import Chart, Figure, KindView, Shares, Side
from service.probes.scoring.counterfactual import KS, MISS_CLASSES, OUTCOMES, SIDES, counterfactual_result
from service.probesets import builtin
from service.text.concepts import ConceptPair


async def run(job: KindRun) -> dict[str, Any]:
    """Pair by pair: decode both images of its minimal pairs (at most ``images`` of them), parse the
    top-K captions, score; a partial result (without intervals) after each pair but the last."""
    engine, spec, probe_set, progress = job.engine, job.spec, job.probe_set, job.progress
    entries = builtin.minimal_pairs(probe_set)
    if spec.pairs is not None:
        entries = [e for e in entries if e.pair.label in spec.pairs]
    minimal = {
        e.pair.label: list(e.minimal_pairs if spec.images is None else e.minimal_pairs[: spec.images])
        for e in entries
    }
    progress.total = 2 * sum(len(v) for v in minimal.values())
    declared = job.declared_held_out()
    held_out = frozenset(declared) if declared is not None else None
    scenes = probe_set.scenes or {}
    generated: dict[int, list[str]] = {}
    attached: dict[str, frozenset[ConceptPair]] = {}
    result: dict[str, Any] = {}
    for n, entry in enumerate(entries, 1):
        ids = [i for m in minimal[entry.pair.label] for i in (m.held_out, m.seen)]
        generated.update(await decode(engine, probe_set, ids, spec.params, progress))
        texts = [c for i in ids for c in generated[i][: KS[-1]]]
        attached.update(await job.parser.pairs([t for t in texts if t not in attached]))
        last = n == len(entries)
        result = await asyncio.to_thread(
            counterfactual_result,
            entries[:n],
            minimal,
            generated,
            attached,
            scenes,
            held_out,
            KS,
            last,
        )
        if not last:
            progress.partial = result
    return result


check = pairs_check(builtin.minimal_pairs)  # every label of pairs is one of the set's held-out pairs


class Gauges:
    """Hit rates and top-1 outcome shares of each side (mean over pairs; the 95% interval's bounds as
    the ``_low`` / ``_high`` series, as every kind's), each pair's hit rates, and held-out − seen with its
    p-value."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.hit = BoundedGauge(
            "compcap_probe_counterfactual_hit_rate",
            "Counterfactual probe: mean over held-out pairs of the share of minimal pairs whose side "
            "(held_out: the held-out image, seen: its seen twin) is hit at K",
            ["model", "ranker", "side", "k"],
            r,
        )
        self.outcome = BoundedGauge(
            "compcap_probe_counterfactual_outcome_rate",
            "Counterfactual probe: share of top-1 captions of a side that hit or miss in each way "
            "(modifier_elsewhere, noun_missing, wrong_value, modifier_omitted)",
            ["model", "ranker", "side", "outcome"],
            r,
        )
        self.pair_hit = latest_gauge(
            "compcap_probe_counterfactual_pair_hit_rate",
            "Counterfactual probe: one held-out pair's share of minimal pairs hit at K, per side",
            ["model", "ranker", "pair", "side", "k"],
            r,
        )
        self.difference = BoundedGauge(
            "compcap_probe_counterfactual_difference",
            "Counterfactual probe: held-out minus seen hit rate at K on the same scenes (paired)",
            ["model", "ranker", "k"],
            r,
        )
        self.p_value = latest_gauge(
            "compcap_probe_counterfactual_difference_p_value",
            "Counterfactual probe: two-sided sign-flip permutation p-value of the held-out minus seen "
            "hit rate at K",
            ["model", "ranker", "k"],
            r,
        )

    def record(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        for side in SIDES:
            part = result.get(side) or {}
            for k, value in (part.get("recall") or {}).items():
                if value is not None:
                    self.hit.set((model, ranker, side, k), float(value), get(part, "recall_interval", k))
            for outcome, value in (part.get("outcomes") or {}).items():
                if value is not None:
                    bounds = get(part, "outcome_intervals", outcome)
                    self.outcome.set((model, ranker, side, outcome), float(value), bounds)
        for row in result.get("pairs") or []:
            for k, value in row["recall"].items():
                if value is not None:
                    self.pair_hit.labels(model, ranker, row["pair"], row["side"], k).set(value)
        for k, test in (get(result, "difference", "recall") or {}).items():
            if isinstance(test, Mapping):
                d = test["difference"]
                self.difference.set((model, ranker, k), float(d["estimate"]), d)
                self.p_value.labels(model, ranker, k).set(float(test["p_value"]))

    def accept(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        """No accepted baseline for this kind."""


def lines(result: Mapping[str, Any]) -> list[str]:
    """Per pair and side: minimal pairs, hit@1 and hit@K, the top-1 outcome shares; the means over pairs
    with their 95% intervals; held-out − seen with its interval and p-value."""
    ks = [str(k) for k in (result.get("ks") or KS)]
    out = [
        "counterfactual minimal pairs: hit rate (a fraction) of the held-out image and of its seen twin; "
        "top-1 outcome shares (hit, then the miss classes)"
    ]
    short = {"hit": "hit", "modifier_elsewhere": "elsewh", "noun_missing": "no noun"}
    short |= {"wrong_value": "wrong", "modifier_omitted": "omitted"}
    rows = [
        [
            cell(r["pair"]),
            cell(r["side"]),
            cell(r["images"]),
            *(cell(get(r, "recall", k), digits=3) for k in ks),
            *(cell(get(r, "outcomes", o), digits=3) for o in OUTCOMES),
        ]
        for r in result.get("pairs") or []
    ]
    heads = ["pair", "side", "n", *(f"hit@{k}" for k in ks), *(f"1:{short[o]}" for o in OUTCOMES)]
    out.append(table(heads, rows))
    summary = []
    for side in SIDES:
        part = result.get(side) or {}
        summary.append(
            [
                side,
                cell(part.get("pairs")),
                *(with_bounds(get(part, "recall", k), get(part, "recall_interval", k), digits=3) for k in ks),
            ]
        )
        for o in MISS_CLASSES:
            summary.append(
                [
                    f"  {o}",
                    "",
                    with_bounds(get(part, "outcomes", o), get(part, "outcome_intervals", o), digits=3),
                    *([""] * (len(ks) - 1)),
                ]
            )
    out += [
        "",
        "mean over pairs [95% interval]",
        table(["side", "pairs", *(f"hit@{k}" for k in ks)], summary),
    ]
    for k in ks:
        test = get(result, "difference", "recall", k)
        if isinstance(test, Mapping):
            d = test["difference"]
            out.append(
                f"held-out − seen hit@{k}: {with_bounds(d['estimate'], d, digits=3)} "
                f"(paired, p = {test['p_value']:.4f})"
            )
    return out


def summary(result: Mapping[str, Any]) -> str:
    """Held-out and seen hit@1 with intervals, the paired difference, the held-out misses' classes."""
    held, seen = result.get("held_out") or {}, result.get("seen") or {}
    test = get(result, "difference", "recall", "1")
    diff = ""
    if isinstance(test, Mapping):
        d = test["difference"]
        diff = f" · difference {with_bounds(d['estimate'], d, digits=3)} p {test['p_value']:.4f}"
    misses = ", ".join(f"{o.replace('_', ' ')} {fixed(get(held, 'outcomes', o), 3)}" for o in MISS_CLASSES)
    return (
        f"held-out pairs ({held.get('pairs') or 0}, {result.get('minimal_pairs') or 0} minimal pairs): "
        f"hit@1 {with_bounds(get(held, 'recall', '1'), get(held, 'recall_interval', '1'), digits=3)}"
        f" · seen twins {with_bounds(get(seen, 'recall', '1'), get(seen, 'recall_interval', '1'), digits=3)}"
        f"{diff} · held-out top-1: {misses}"
    )


# each held-out pair of the set with its field and number of minimal pairs
set_details = pairs_details(
    builtin.minimal_pairs, lambda p: {"field": p.field, "minimal_pairs": len(p.minimal_pairs)}
)


HELD = Side(
    "held_out",
    "held",
    "held-out value",
    "held-out value: a scene whose object has the unseen value",
    "held-out value, per pair",
)
SEEN = Side(
    "seen",
    "seen",
    "seen twin",
    "seen twin: the same scene with a seen value",
    "seen twin, per pair",
    row="twin of {pair}",
    note="value",
    note_label="seen values",
)
VIEW = KindView(
    images="Minimal pairs per pair",
    sizing="minimal pairs per pair",
    chart=Chart(
        layout="sides",
        figure="hit@",
        about="hit@K on minimal pairs: the share of a pair's minimal pairs whose top-K captions attach the "
        "held-out pair to the scene with the held-out value, and the seen pair to its seen twin; mean over "
        "pairs, each bar with its 95% interval.",
        title="per held-out pair, on its minimal pairs",
        versus="held-out value against its seen twin",
        sides=(HELD, SEEN),
        units="minimal pairs",
    ),
    shares=Shares(
        classes="outcome_classes",
        names={o: o.replace("_", " ") for o in OUTCOMES},
        heading="Top-1 outcome shares per class, with their 95% intervals:",
        title="top-1 outcome shares per class",
        column="top-1 caption",
        share="share of top-1 captions",
        caption="Counterfactual minimal pairs: what each side's top-1 caption did — a hit, or a miss by "
        "class (modifier on another object, noun missing, wrong value, modifier omitted) — as shares of "
        "{minimal_pairs} minimal pairs (mean over pairs, 95% interval).",
        paired="paired over the minimal pairs",
    ),
)
FIELDS = {
    "ks": "the K of hit@K",
    "outcome_classes": "the top-1 outcomes in order: hit, then the miss classes",
    "held_out_known": "whether the captioner's held-out pairs are known (each row's model_held_out)",
    "pairs": "two rows per held-out pair, its held-out side (held_out true) and its seen twin: pair, kind, "
    "field, side, model_held_out, images (minimal pairs), value (the seen twin's: value -> count), hits "
    "and recall by K, outcomes by class",
    "held_out": "means over the pairs of the held-out side: pairs, recall by K, outcomes",
    "seen": "means over the pairs of the seen side, as held_out",
    "difference": "held-out − seen as paired tests over the minimal pairs: recall by K, outcomes by class",
    "pair_differences": "each pair's held-out − seen, as difference",
    "minimal_pairs": "minimal pairs scored",
    "intervals": "whether the intervals and tests were computed (a partial result has none)",
}
FIGURES = (
    Figure("held_out.recall.*", "held-out value hit@{}"),
    Figure("seen.recall.*", "seen twin hit@{}"),
    Figure(
        "difference.recall.*.difference.estimate", "held-out − seen hit@{}", "difference.recall.*.difference"
    ),
    Figure("held_out.outcomes.*", "held-out value top-1 {}", "held_out.outcome_intervals.*"),
    Figure("seen.outcomes.*", "seen twin top-1 {}", "seen.outcome_intervals.*"),
)

KIND = module_kind(
    globals(),
    name="counterfactual",
    description="Counterfactual minimal pairs (a seen pair's scene with one attribute or action set to the "
    "held-out value): hit rates held-out vs seen, every miss classified by the scene graph",
    takes_pairs=True,
)
