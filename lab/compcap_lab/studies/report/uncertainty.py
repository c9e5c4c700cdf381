"""The reproduction's 95% intervals, recomputed from the per-pair counts the report stores.

Each evaluation stores, per held-out pair, its Test Comb ``images`` and the ``hits`` at each K; a hit is
binary per image, so a pair's per-image hit vector is known up to order, and order does not matter to a
bootstrap (``service.evaluation.intervals.binary_units``). A row's Recall@K is the mean over its held-out
groups (one trained model each) of the group's mean over its pairs: its interval resamples the pairs
within each group and the images within each drawn pair (``stratified_interval``). A ratio of two rows
draws the pairs jointly for both and the images within each row independently, from the per-pair counts,
so it is not a paired test (``ratio_interval``), though the per-image first ranks the paired tests read
are stored. Per category there is one pair per
group: the category's pairs are resampled together (``bootstrap_interval``).

Nothing here needs the model zoo: ``compcap-lab report --reuse`` recomputes every interval from
``reproduction.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compcap_lab.studies.report.collect import find_result
from compcap_lab.studies.report.family import holm_values
from service.evaluation.intervals import (
    LEVEL,
    RESAMPLES,
    SEED,
    Interval,
    binary_units,
    bootstrap_interval,
    paired_test,
    ratio_interval,
    stratified_interval,
)

KS = "12345"
# (numerator, denominator, target): the targets' ratios of mean Recall@5
RATIOS = (("BUTR+RR", "BUTD", 2.0), ("FULL", "BUTR+RR", 1.5))
# (a, b): rows compared image for image (the control rows). BUTR+RR against BUTD+VSE++ asks
# whether the jointly trained ranker beats a separately trained one at the same B; BUTD+BUTR head
# against BUTD+VSE++, which ranker, on the same beams; BUTR+RR against BUTD+BUTR head, which beams, with
# the same kind of ranker; the others, what re-ranking 100 beams gives at all.
PAIRED = (
    ("BUTR+RR", "BUTD+VSE++"),
    ("BUTR+RR", "BUTD"),
    ("BUTD+VSE++", "BUTD"),
    ("BUTD+BUTR head", "BUTD+VSE++"),
    ("BUTR+RR", "BUTD+BUTR head"),
)
PAIRED_METHOD = (
    "Paired: both rows' Recall@5 on the same (held-out pair, image) cases, a hit per image from its "
    "stored first rank; the difference a − b in mean Recall@5 (pairs of every group pooled) with its "
    "95% bootstrap interval (pairs, then images within a pair) and a two-sided sign-flip permutation "
    "p-value (10 000 flips, per image)."
)
METHOD = (
    "95% percentile bootstrap, 2000 resamples, seed 0: held-out pairs resampled within each group "
    "(one trained model each), images within each drawn pair; the hit vector of a pair is rebuilt "
    "from its stored per-pair counts. Ratios draw the pairs jointly for both rows and the images "
    "independently per row, from the per-pair counts: not paired, so no narrower than a paired "
    "interval would be (the per-image first ranks the paired tests below use are stored). "
    "Per category: the category's pairs (one per group) resampled together, then their images."
)


def _pairs(result: dict[str, Any], k: str, category: str | None = None) -> list[list[float]]:
    return [
        binary_units(int(p["hits"][k]), int(p["images"]))
        for p in (result.get("per_pair") or {}).values()
        if category is None or p.get("category") == category
    ]


def row_strata(collected: dict[str, Any], label: str, k: str = "5") -> list[list[list[float]]]:
    """Row ``label``'s Test Comb hits at ``k``: [group][pair][image] (1.0 hit, 0.0 miss)."""
    return [
        _pairs(find_result(collected["raw"][f"group{g}/test"]["results"], c, r), k)
        for g, c, r in collected["rows"][label]
    ]


def _hit(rank: int | None, k: int) -> float:
    return 1.0 if rank is not None and rank <= k else 0.0


def pair_cases(
    a: dict[str, Any], b: dict[str, Any], k: int = 5, where: str = ""
) -> dict[str, tuple[list[float], list[float]]] | None:
    """Two evaluations' ``per_pair`` on the same cases: per pair label of ``a`` (its order), the two hit
    vectors at ``k``, images in sorted id order; None when either stored no first ranks (older
    reports). Raises when a pair was scored on different images."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for label, pair in a.items():
        ranks_a, ranks_b = pair.get("first_rank"), (b.get(label) or {}).get("first_rank")
        if ranks_a is None or ranks_b is None:
            return None
        images = sorted(ranks_a)
        if sorted(ranks_b) != images:
            raise ValueError(f"{where} were scored on different images of {label}")
        out[label] = ([_hit(ranks_a[i], k) for i in images], [_hit(ranks_b[i], k) for i in images])
    return out


def paired_cases(
    collected: dict[str, Any], a: str, b: str, k: int = 5
) -> dict[tuple[int, str], tuple[list[float], list[float]]]:
    """Rows ``a`` and ``b``'s Test Comb hits at ``k`` on the same cases: (group, pair label) → the two
    hit vectors, images in the same order, for every group both rows have; empty when the evaluations
    stored no first ranks (older reports)."""
    out: dict[tuple[int, str], tuple[list[float], list[float]]] = {}
    b_entries = {g: (c, r) for g, c, r in collected["rows"][b]}
    for g, cap, ranker in collected["rows"][a]:
        if g not in b_entries:
            continue
        results = collected["raw"][f"group{g}/test"]["results"]
        pa = find_result(results, cap, ranker).get("per_pair") or {}
        pb = find_result(results, *b_entries[g]).get("per_pair") or {}
        cases = pair_cases(pa, pb, k, f"rows {a} and {b} (group {g})")
        if cases is None:
            return {}
        out.update({(g, label): hits for label, hits in cases.items()})
    return out


def paired_units(collected: dict[str, Any], a: str, b: str, k: int = 5) -> tuple[list[list[float]], ...]:
    """Rows ``a`` and ``b``'s Test Comb hits at ``k`` on the same cases: two [pair][image] lists, pairs of
    every group both rows have, images in the same order; empty when the evaluations stored no first
    ranks (older reports)."""
    cases = paired_cases(collected, a, b, k)
    return [x for x, _ in cases.values()], [y for _, y in cases.values()]


def paired_tests(collected: dict[str, Any], compare: Sequence[tuple[str, str]] = PAIRED) -> dict[str, Any]:
    """``compare``'s comparisons (default ``PAIRED``), "a vs b" → ``PairedTest.as_dict`` (difference of
    mean Recall@5 with its interval, p-value), for the pairs of rows present with stored first ranks."""
    out: dict[str, Any] = {}
    for a, b in compare:
        if a not in collected["rows"] or b not in collected["rows"]:
            continue
        units_a, units_b = paired_units(collected, a, b)
        test = paired_test(units_a, units_b) if units_a else None
        if test is not None:
            out[f"{a} vs {b}"] = test.as_dict()
    return out


FAMILY_METHOD = (
    "Holm–Bonferroni over the family of the paired tests above: the family-wise error rate is kept at "
    "5% whatever the dependence between them."
)


def family(tests: dict[str, Any], what: str) -> dict[str, Any]:
    """A family of paired tests (name → ``PairedTest.as_dict``): which tests form it and each one's
    Holm-adjusted p-value (``family.holm``)."""
    return {"what": what, "tests": list(tests), "adjustment": "holm", "p_holm": holm_values(tests)}


SWEEP_METHOD = (
    "Per B: mean Recall@5 with its 95% interval (pairs resampled within each group, images within a "
    "pair), and the paired difference B − 100 on the same (held-out pair, image) cases, from each run's "
    "stored first ranks (interval: pairs, then images; sign-flip permutation p-value, 10 000 flips); "
    "the tests against B = 100 form a family of their own, Holm-adjusted."
)


def sweep_tests(collected: dict[str, Any]) -> dict[str, Any] | None:
    """BUTR+RR against the number of re-ranked beams B from the per-pair first ranks the sweep stores
    (``rerank_sweep_cases``: B → "group<g>" → ``per_pair``): per B its Recall@5 interval, and each B's
    paired test against the largest B (the report's B = 100) with the family's Holm-adjusted p-values.
    None when the sweep stored its means only."""
    cases = collected.get("rerank_sweep_cases")
    if not cases:
        return None
    beams = sorted(cases, key=int)
    reference = beams[-1]
    out: dict[str, Any] = {"method": SWEEP_METHOD, "reference": reference, "recall_at_5": {}, "paired": {}}
    for beam in beams:
        strata = [
            [binary_units(int(p["hits"]["5"]), int(p["images"])) for p in per_pair.values()]
            for per_pair in cases[beam].values()
        ]
        out["recall_at_5"][beam] = _d(stratified_interval(strata))
        if beam == reference:
            continue
        units_a: list[list[float]] = []
        units_b: list[list[float]] = []
        for group, per_pair in cases[beam].items():
            found = pair_cases(per_pair, cases[reference].get(group) or {}, 5, f"B = {beam} and {reference}")
            if found is None:
                units_a = []
                break
            units_a += [x for x, _ in found.values()]
            units_b += [y for _, y in found.values()]
        test = paired_test(units_a, units_b) if units_a else None
        if test is not None:
            out["paired"][f"B = {beam} vs B = {reference}"] = test.as_dict()
    out["family"] = family(out["paired"], f"BUTR+RR at each B against B = {reference}")
    return out


def cluster_interval(
    clusters: Sequence[Sequence[Sequence[float]]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """A mean over clusters of the mean over each cluster's members of the member's mean over units,
    with a cluster bootstrap: ``clusters[c][m][u]`` — cluster ``c`` (a held-out pair), member ``m`` (a
    training seed), unit ``u`` (an image; every member of a cluster has the same units, in the same
    order). Each resample draws the clusters with replacement and, within each drawn cluster, its units
    with replacement — one draw for all its members, since they share the units — keeping every member.
    Percentile interval at ``level``; ``groups`` = clusters, ``units`` = member × unit values. None when
    there is no unit."""
    if any(len({len(m) for m in c}) > 1 for c in clusters):
        raise ValueError("each cluster must be a [member][unit] table: every member with the same units")
    kept = [np.asarray(c, dtype=np.float64) for c in clusters if len(c) and len(c[0])]
    for c in kept:
        if c.ndim != 2 or not np.all(np.isfinite(c)):
            raise ValueError("each cluster must be a [member][unit] table of finite numbers")
    if not kept:
        return None
    estimate = float(np.mean([c.mean() for c in kept]))
    rng = np.random.default_rng(seed)
    n = len(kept)
    picks = rng.integers(0, n, size=(resamples, n))  # [R, C] clusters drawn
    totals = np.zeros((resamples, n))
    for i, table in enumerate(kept):
        drawn = picks == i
        count = int(drawn.sum())
        if count:
            units = rng.integers(0, table.shape[1], size=(count, table.shape[1]))  # [count, U]
            totals[drawn] = table[:, units].mean(axis=(0, 2))
    reps = totals.mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(reps, [tail, 1 - tail])
    return Interval(
        estimate,
        float(min(low, estimate)),
        float(max(high, estimate)),
        float(reps.std(ddof=1)),
        n,
        int(sum(c.size for c in kept)),
        level,
        resamples,
    )


def difference_text(difference: dict[str, Any]) -> str:
    """A paired difference ×100 with its interval, signed: "+0.4 [-1.7, +2.6]"."""
    d = difference
    return f"{100 * d['estimate']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _d(found: Interval | None) -> dict[str, Any] | None:
    return None if found is None else found.as_dict()


def intervals(collected: dict[str, Any]) -> dict[str, Any]:
    """Every Recall@K of the report with its interval (``as_dict``: estimate, low, high, se, groups =
    pairs, units = images), per row and K, per row and group at K = 5, per row and category at K = 5,
    and the targets' ratios of mean Recall@5."""
    out: dict[str, Any] = {"method": METHOD, "recall_at_k": {}, "recall_at_5_by_group": {}}
    out["recall_at_5_by_category"] = {}
    for label, entries in collected["rows"].items():
        out["recall_at_k"][label] = {k: _d(stratified_interval(row_strata(collected, label, k))) for k in KS}
        strata = row_strata(collected, label)
        out["recall_at_5_by_group"][label] = {
            str(g): _d(stratified_interval([s])) for (g, _, _), s in zip(entries, strata, strict=True)
        }
        found = [find_result(collected["raw"][f"group{g}/test"]["results"], c, r) for g, c, r in entries]
        categories = sorted({p["category"] for f in found for p in (f.get("per_pair") or {}).values()})
        out["recall_at_5_by_category"][label] = {
            c: _d(bootstrap_interval([pair for f in found for pair in _pairs(f, "5", c)])) for c in categories
        }
    out["ratios"] = {}
    for num, den, target in RATIOS:
        if num in collected["rows"] and den in collected["rows"]:
            ratio = ratio_interval(row_strata(collected, num), row_strata(collected, den))
            out["ratios"][f"{num} / {den}"] = {"target": target, **(_d(ratio) or {})}
    control = "BUTD+VSE++"
    if control in collected["rows"] and "BUTD" in collected["rows"]:
        ratio = ratio_interval(row_strata(collected, control), row_strata(collected, "BUTD"))
        out["ratios"][f"{control} / BUTD"] = _d(ratio) or {}
    out["paired"] = paired_tests(collected)
    out["paired_method"] = PAIRED_METHOD
    out["paired_family"] = family(out["paired"], "the control rows' paired tests")
    sweep = sweep_tests(collected)
    if sweep is not None:
        out["rerank_sweep"] = sweep
    return out


def cell(value: float | None, found: dict[str, Any] | None) -> str:
    """A fraction ×100 with its interval: "3.5 [1.5, 5.8]"; the plain value without one."""
    if value is None:
        return "—"
    if not found:
        return f"{100 * value:.1f}"
    return f"{100 * value:.1f} [{100 * found['low']:.1f}, {100 * found['high']:.1f}]"


def ratio_text(found: dict[str, Any]) -> str:
    """ "3.43× [2.18, 6.06]" (an infinite bound prints as ∞)."""

    def x(v: float) -> str:
        return "∞" if v == float("inf") else f"{v:.2f}"

    return f"{x(found['estimate'])}× [{x(found['low'])}, {x(found['high'])}]"
