"""The reproduction's 95% intervals, recomputed from the per-pair counts the report stores.

Each evaluation stores, per held-out pair, its Test Comb ``images`` and the ``hits`` at each K; a hit is
binary per image, so a pair's per-image hit vector is known up to order, and order does not matter to a
bootstrap (``service.evaluation.intervals.binary_units``). A row's Recall@K is the mean over its held-out
groups (one trained model each) of the group's mean over its pairs: its interval resamples the pairs
within each group and the images within each drawn pair (``stratified_interval``). A ratio of two rows
draws the pairs jointly for both and the images within each row independently: which image a model hit
is not stored, so this is not a paired test (``ratio_interval``). Per category there is one pair per
group: the category's pairs are resampled together (``bootstrap_interval``).

Nothing here needs the model zoo: ``compcap-lab report --reuse`` recomputes every interval from
``reproduction.json``.
"""

from __future__ import annotations

from typing import Any

from compcap_lab.studies.report.collect import find_result
from service.evaluation.intervals import (
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
    "independently per row (per-image pairing is not stored, so they are not paired tests). "
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


def paired_units(collected: dict[str, Any], a: str, b: str, k: int = 5) -> tuple[list[list[float]], ...]:
    """Rows ``a`` and ``b``'s Test Comb hits at ``k`` on the same cases: two [pair][image] lists, pairs of
    every group both rows have, images in the same order; empty when the evaluations stored no first
    ranks (older reports)."""
    out_a: list[list[float]] = []
    out_b: list[list[float]] = []
    b_entries = {g: (c, r) for g, c, r in collected["rows"][b]}
    for g, cap, ranker in collected["rows"][a]:
        if g not in b_entries:
            continue
        results = collected["raw"][f"group{g}/test"]["results"]
        pa = find_result(results, cap, ranker).get("per_pair") or {}
        pb = find_result(results, *b_entries[g]).get("per_pair") or {}
        for label, pair in pa.items():
            ranks_a, ranks_b = pair.get("first_rank"), (pb.get(label) or {}).get("first_rank")
            if ranks_a is None or ranks_b is None:
                return [], []
            images = sorted(ranks_a)
            if sorted(ranks_b) != images:
                raise ValueError(f"rows {a} and {b} were scored on different images of {label} (group {g})")

            def hit(rank: int | None) -> float:
                return 1.0 if rank is not None and rank <= k else 0.0

            out_a.append([hit(ranks_a[i]) for i in images])
            out_b.append([hit(ranks_b[i]) for i in images])
    return out_a, out_b


def paired_tests(collected: dict[str, Any]) -> dict[str, Any]:
    """``PAIRED``'s comparisons, "a vs b" → ``PairedTest.as_dict`` (difference of mean Recall@5 with its
    interval, p-value), for the pairs of rows present with stored first ranks."""
    out: dict[str, Any] = {}
    for a, b in PAIRED:
        if a not in collected["rows"] or b not in collected["rows"]:
            continue
        units_a, units_b = paired_units(collected, a, b)
        test = paired_test(units_a, units_b) if units_a else None
        if test is not None:
            out[f"{a} vs {b}"] = test.as_dict()
    return out


VERDICTS = {
    "higher": "a is higher (interval above 0)",
    "lower": "b is higher (interval below 0)",
    "not significant": "no significant difference (interval spans 0)",
    "mixed": "not settled: the permutation test, which takes these pairs as given, rejects equality, "
    "but the interval over pairs spans 0",
}


def difference_text(difference: dict[str, Any]) -> str:
    """A paired difference ×100 with its interval, signed: "+0.4 [-1.7, +2.6]"."""
    d = difference
    return f"{100 * d['estimate']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def verdict(test: dict[str, Any], level: float = 0.05) -> str:
    """What a paired test (``PairedTest.as_dict``) supports of a against b at ``level``: "higher" or
    "lower" when the interval excludes 0 and p < level, "not significant" when neither does, and
    "mixed" when they disagree — the sign-flip p-value takes the pairs as given, the interval resamples
    them, so a difference carried by few pairs can pass one and not the other."""
    d = test["difference"]
    off = d["low"] > 0 or d["high"] < 0
    small = test["p_value"] < level
    if off and small:
        return "higher" if d["low"] > 0 else "lower"
    if not off and not small:
        return "not significant"
    return "mixed"


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
