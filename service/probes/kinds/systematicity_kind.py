"""The systematicity probe (Nikolaus et al., 2019, §3): Recall@K of each concept pair on its Test-Comb
images and false composition on its Test-no-Comb images; the maths is
``service.probes.scoring.systematicity``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from service.probes.kinds.bounds import BoundedGauge, latest_gauge
from service.probes.kinds.record import KindRun, cap, decode, module_kind, pairs_check, pairs_details
from service.probes.kinds.tables import bounds, cell, fixed, get, table, with_bounds
from service.probes.kinds.view import Chart, Figure, KindView, Side
from service.probes.scoring.parser import lookup
from service.probes.scoring.systematicity import KS, compare, systematicity_result, with_intervals
from service.probesets import builtin
from service.text.concepts import ConceptPair


async def run(job: KindRun) -> dict[str, Any]:
    """Group by group: decode its Test-Comb images (every pair of the group, as ``compcap-lab evaluate``
    does) and the Test-no-Comb images of the reported pairs, parse, score; partial result after each
    (without intervals), the final one with them (``with_intervals``)."""
    engine, spec, probe_set, progress = job.engine, job.spec, job.probe_set, job.progress
    entries = builtin.pair_images(probe_set)
    wanted = set(spec.pairs) if spec.pairs is not None else {e.pair.label for e in entries}
    reported = [e for e in entries if e.pair.label in wanted]
    groups = sorted({e.group for e in reported})
    members = {g: [e for e in entries if e.group == g] for g in groups}
    comb = {g: sorted({i for e in members[g] for i in cap(e.comb, spec.images)}) for g in groups}
    no_comb = {e.pair.label: cap(e.no_comb, spec.images) for e in reported}
    progress.total = sum(len(comb[g]) for g in groups) + sum(len(v) for v in no_comb.values())
    held_out = job.declared_held_out()
    generated: dict[int, list[str]] = {}
    parsed: dict[str, frozenset[ConceptPair]] = {}
    result: dict[str, Any] = {}
    for n, g in enumerate(groups, 1):
        group_reported = [e.pair for e in reported if e.group == g]
        ids = [i for i in dict.fromkeys([*comb[g], *(i for p in group_reported for i in no_comb[p.label])])]
        generated.update(
            await decode(engine, probe_set, [i for i in ids if i not in generated], spec.params, progress)
        )
        done_groups = groups[:n]
        texts = [c for i in ids for c in generated[i][: KS[-1]]]
        texts += [r for i in comb[g] for r in probe_set.captions[i]]
        parsed.update(await job.parser.pairs([t for t in texts if t not in parsed]))
        result = systematicity_result(
            {g2: [e.pair for e in members[g2]] for g2 in done_groups},
            {g2: comb[g2] for g2 in done_groups},
            no_comb,
            [e.pair for e in reported if e.group in done_groups],
            held_out,
            generated,
            probe_set.captions,
            lookup(parsed),
            own=None if spec.images is None else {e.pair.label: cap(e.comb, spec.images) for e in reported},
        )
        if n < len(groups):
            progress.partial = result
    if not result:
        return result
    start = time.perf_counter()
    result = await asyncio.to_thread(with_intervals, result)
    progress.timings_s["intervals"] = round(time.perf_counter() - start, 3)
    return result


check = pairs_check(builtin.pair_images)  # every label of pairs is one of the set's pairs


def held_out_known(result: Mapping[str, Any]) -> bool:
    """Whether the result says which pairs were held out (results written before the key: yes)."""
    return bool(result.get("held_out_known", True))


def held_label(held_out: bool | None) -> str:
    """The ``held_out`` label of a pair row: "true", "false", or "unknown" (not declared)."""
    return "unknown" if held_out is None else str(held_out).lower()


def recall_means(result: Mapping[str, Any]) -> Iterator[tuple[str, str, float]]:
    """(held_out label "true"/"false", or "unknown" for the mean over every pair of a captioner whose
    held-out pairs are not known; K; mean Recall@K) of a systematicity result, where defined."""
    parts = (("true", "held_out"), ("false", "seen")) if held_out_known(result) else (("unknown", "all"),)
    for held, key in parts:
        for k, value in (get(result, key, "recall") or {}).items():
            if value is not None:
                yield held, k, value


class Gauges:
    """Recall@K per pair and its held-out / seen means, the accepted baseline, false composition; the
    first two and the last with their 95% interval's bounds as ``<name>_low`` / ``<name>_high``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.recall = BoundedGauge(
            "compcap_probe_recall_at_k",
            "Live systematicity probe: Recall@K of a concept pair (Nikolaus et al., 2019, Eq. 1)",
            ["model", "ranker", "pair", "category", "k", "held_out"],
            r,
        )
        self.recall_mean = BoundedGauge(
            "compcap_probe_recall_at_k_mean",
            "Live systematicity probe: mean Recall@K over the held-out (held_out=true) or seen pairs, or "
            "over every pair when the captioner's held-out pairs are not known (held_out=unknown)",
            ["model", "ranker", "k", "held_out"],
            r,
        )
        self.accepted_recall_mean = latest_gauge(
            "compcap_probe_accepted_recall_at_k_mean",
            "The accepted baseline of compcap_probe_recall_at_k_mean (POST /v1/probes/{id}/accept)",
            ["model", "ranker", "k", "held_out"],
            r,
        )
        self.false_composition = BoundedGauge(
            "compcap_probe_false_composition",
            "Share of Test-no-Comb images whose top-1 caption attaches the pair though the image does not",
            ["model", "ranker", "pair"],
            r,
        )

    def record(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        for row in result.get("pairs", []):
            for k, value in row["recall"].items():
                if value is not None:
                    labels = (
                        model,
                        ranker,
                        row["pair"],
                        row["category"] or "",
                        k,
                        held_label(row["held_out"]),
                    )
                    self.recall.set(labels, value, get(row, "recall_interval", k))
            rate = row["false_composition"].get("1")
            if rate is not None:
                self.false_composition.set(
                    (model, ranker, row["pair"]), rate, get(row, "false_composition_interval", "1")
                )
        parts = {"true": "held_out", "false": "seen", "unknown": "all"}
        for held, k, value in recall_means(result):
            bounds = get(result, parts[held], "recall_interval", k)
            self.recall_mean.set((model, ranker, k, held), value, bounds)

    def accept(self, model: str, ranker: str, result: Mapping[str, Any]) -> None:
        for held, k, value in recall_means(result):
            self.accepted_recall_mean.labels(model, ranker, k, held).set(value)


def lines(result: Mapping[str, Any]) -> list[str]:
    """Recall@K and false composition per pair (with the 95% interval of R@K for the largest K), then
    the held-out / seen means per category with their intervals: fractions in [0, 1] with three
    decimals, as the API and the web page report them."""
    ks = [str(k) for k in (result.get("ks") or [1, 2, 3, 4, 5])]
    fc = ["1", ks[-1]]
    out = [
        "recall (Recall@K, a fraction in [0, 1]) of each pair on its Test-Comb images; "
        "false composition (a fraction) on Test-no-Comb; [low, high]: the 0.95 bootstrap interval"
    ]
    rows = [
        [
            cell(get(r, "pair")),
            cell(get(r, "group")),
            cell(get(r, "category")),
            cell(get(r, "held_out")),
            cell(get(r, "images")),
            *(cell(get(r, "recall", k), digits=3) for k in ks),
            bounds(get(r, "recall_interval", ks[-1]), digits=3),
            cell(get(r, "no_comb_images")),
            *(cell(get(r, "false_composition", k), digits=3) for k in fc),
        ]
        for r in result.get("pairs") or []
    ]
    headers = ["pair", "group", "category", "held out", "images", *(f"R@{k}" for k in ks)]
    headers += [f"R@{ks[-1]} CI", "no-comb"]
    out.append(table([*headers, *(f"FC@{k}" for k in fc)], rows))
    summary = []
    known = held_out_known(result)
    parts = (("held_out", "held out"), ("seen", "seen")) if known else (("all", "all (held out unknown)"),)
    for name, label in parts:
        part = result.get(name)
        summary.append(
            [
                label,
                cell(get(part, "pairs")),
                *(with_bounds(get(part, "recall", k), get(part, "recall_interval", k), digits=3) for k in ks),
            ]
        )
        for cat, recall in (get(part, "per_category") or {}).items():
            summary.append(
                [
                    f"  {cat}",
                    "",
                    *(
                        with_bounds(get(recall, k), get(part, "per_category_interval", cat, k), digits=3)
                        for k in ks
                    ),
                ]
            )
    out += [
        "",
        "mean recall (Recall@K) [0.95 interval]",
        table(["pairs", "n", *(f"R@{k}" for k in ks)], summary),
    ]
    out.append(
        "false composition: "
        + "  ".join(
            f"FC@{k} "
            + with_bounds(
                get(result, "false_composition", k), get(result, "false_composition_interval", k), digits=3
            )
            for k in fc
        )
    )
    return out


def summary(result: Mapping[str, Any]) -> str:
    """Held-out R@1 and R@K, seen R@K (or, held-out pairs unknown, R@1 and R@K of every pair), false
    composition @1: fractions with three decimals."""
    ks = result.get("ks") or [1, 5]
    last = str(ks[-1])
    if not held_out_known(result):
        every = result.get("all") or {}
        return (
            f"pairs ({every.get('pairs') or 0}, held-out pairs not declared): "
            f"R@1 {fixed(get(every, 'recall', '1'), 3)}, R@{last} {fixed(get(every, 'recall', last), 3)}"
            f" · false composition @1 {fixed(get(result, 'false_composition', '1'), 3)}"
        )
    held = result.get("held_out") or {}
    return (
        f"held-out pairs ({held.get('pairs') or 0}): R@1 {fixed(get(held, 'recall', '1'), 3)}, "
        f"R@{last} {fixed(get(held, 'recall', last), 3)}"
        f" · seen: R@{last} {fixed(get(result, 'seen', 'recall', last), 3)}"
        f" · false composition @1 {fixed(get(result, 'false_composition', '1'), 3)}"
    )


# each pair of the set with its group and its Test-Comb / Test-no-Comb image counts
set_details = pairs_details(
    builtin.pair_images, lambda p: {"group": p.group, "comb": len(p.comb), "no_comb": len(p.no_comb)}
)


VIEW = KindView(
    images="Images per pair",
    sizing="images per pair",
    chart=Chart(
        layout="sides",
        figure="Recall@",
        about="Recall@K: the fraction of a concept pair's images whose top-K captions attach the pair; "
        "each bar with its 95% interval.",
        title="per concept pair",
        versus="held out against seen",
        sides=(
            Side("held_out", "held", "held out", "held out: never together in training", "held out pairs"),
            Side("seen", "seen", "seen", "seen in training", "seen pairs"),
        ),
        every=Side("all", "all", "all", "every pair (the model's held-out pairs are not known)", "all pairs"),
    ),
)
FIELDS = {
    "ks": "the K of Recall@K",
    "pairs": "one row per pair: pair, kind, group, category, held_out (null: not known), images, hits and "
    "recall by K, no_comb_images, false_composition at 1 and the largest K, first_hit and "
    "no_comb_first_hit (image -> rank of the first top-K caption attaching the pair, or null)",
    "held_out_known": "whether the captioner's held-out pairs are known",
    "held_out": "means over the held-out pairs: pairs, recall by K, per_category (null when not known)",
    "seen": "means over the seen pairs, as held_out",
    "all": "means over every pair, as held_out",
    "false_composition": "mean false-composition rate over the pairs, at 1 and the largest K",
    "groups": "each group's Test-Comb images",
    "intervals": "how the intervals were drawn (level, resamples, seed, unit order)",
}
FIGURES = (
    Figure("held_out.recall.*", "held-out Recall@{}"),
    Figure("seen.recall.*", "seen Recall@{}"),
    Figure("all.recall.*", "every pair's Recall@{}"),
    Figure("false_composition.*", "false composition @{}"),
)

KIND = module_kind(
    globals(),
    name="systematicity",
    description="Nikolaus et al., 2019: Recall@K of held-out concept pairs on their Test-Comb images, false "
    "composition",
    takes_pairs=True,
    compare=compare,
)
