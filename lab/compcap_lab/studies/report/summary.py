"""The report's figures: each table row averaged over its groups, the targets, and the Markdown
tables built from them (values ×100)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compcap_lab.studies.report.collect import SETS, find_result, mean_of
from compcap_lab.studies.report.uncertainty import cell, ratio_text
from service.evaluation.recall import CATEGORIES  # the pair categories the recall report gives

METRICS = ("recall_at_5_mean", "bleu4", "meteor", "rouge_l", "cider_d")


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal; "—" for None."""
    return "—" if x is None else f"{100 * x:.1f}"


def summarise(collected: dict[str, Any], groups: Sequence[int]) -> dict[str, Any]:
    """Average each table row over its groups: metrics per set, Recall@K curve, per-category Recall@5."""
    table: dict[str, Any] = {}
    for label, entries in collected["rows"].items():
        summary: dict[str, Any] = {"groups": sorted({g for g, _, _ in entries})}
        for set_name in SETS:
            found = [
                find_result(collected["raw"][f"group{g}/{set_name}"]["results"], c, r) for g, c, r in entries
            ]
            summary[set_name] = {m: mean_of([f[m] for f in found]) for m in METRICS}
            if set_name == "test":
                summary["recall_at_k"] = {k: mean_of([f["recall_at_k"][k] for f in found]) for k in "12345"}
                summary["per_category"] = {
                    c: mean_of(
                        [
                            f["per_category"][c]["recall"]["5"]
                            for f in found
                            if f["per_category"] and f["per_category"].get(c, {}).get("recall")
                        ]
                    )
                    for c in CATEGORIES
                }
                summary["images"] = [collected["raw"][f"group{g}/test"]["images"] for g, _, _ in entries]
        table[label] = summary
    return table


def targets(
    table: dict[str, Any], ratios: dict[str, Any] | None = None
) -> list[tuple[str, str, bool | None, bool]]:
    """The targets as (what, measured, met by the interval's lower bound — None without an interval —, met by
    the point estimate): the ratios of mean Recall@5 of Nikolaus et al. (2019), with their intervals from
    ``ratios`` (``uncertainty.intervals(...)["ratios"]``), and the in-distribution (Test no Comb) CIDEr-D of
    BUTR+RR against BUTD."""

    def get(row: str, set_name: str, metric: str) -> float | None:
        value = table.get(row, {}).get(set_name, {}).get(metric)
        return None if value is None else float(value)

    out: list[tuple[str, str, bool | None, bool]] = []
    ratios = ratios or {}
    rr, butd, full = (get(r, "test", "recall_at_5_mean") for r in ("BUTR+RR", "BUTD", "FULL"))
    for num, den, a, b, what in (
        (
            "BUTR+RR",
            "BUTD",
            rr,
            butd,
            "BUTR+RR mean Recall@5 ≥ 2× BUTD's (Nikolaus et al., 2019: 13.2 vs 6.5)",
        ),
        ("FULL", "BUTR+RR", full, rr, "FULL ≥ 1.5× BUTR+RR (Nikolaus et al., 2019: 33.3 vs 13.2)"),
    ):
        if a is None or not b:
            continue
        target = 2.0 if num == "BUTR+RR" else 1.5
        found = ratios.get(f"{num} / {den}")
        measured = f"{100 * a:.1f} vs {100 * b:.1f} = " + (ratio_text(found) if found else f"{a / b:.2f}×")
        out.append((what, measured, found["low"] >= target if found else None, a >= target * b))
    c_rr, c_butd = get("BUTR+RR", "test_no_comb", "cider_d"), get("BUTD", "test_no_comb", "cider_d")
    if c_rr is not None and c_butd:
        gap = (c_rr - c_butd) / c_butd
        out.append(
            (
                "BUTR+RR in-distribution CIDEr-D within 10% of BUTD's",
                f"{100 * c_rr:.1f} vs {100 * c_butd:.1f} ({100 * gap:+.1f}%)",
                None,
                abs(gap) <= 0.10,
            )
        )
    return out


def per_group_lines(collected: dict[str, Any], found: dict[str, Any] | None = None) -> list[str]:
    """Mean Recall@5 of each multi-group row per held-out group (with its interval from ``found``,
    ``uncertainty.intervals``), and BUTR+RR / BUTD per group."""
    by_group = (found or {}).get("recall_at_5_by_group", {})
    per: dict[str, dict[int, float | None]] = {}
    for label, entries in collected["rows"].items():
        if len({g for g, _, _ in entries}) < 2:
            continue
        per[label] = {
            g: find_result(collected["raw"][f"group{g}/test"]["results"], c, r)["recall_at_5_mean"]
            for g, c, r in entries
        }
    if not per:
        return []
    groups = sorted({g for values in per.values() for g in values})
    lines = [
        "",
        "## Recall@5 per held-out group (Test Comb; the tables above average these)",
        "",
        "| model | " + " | ".join(f"group {g}" for g in groups) + " |",
        "|---" * (len(groups) + 1) + "|",
    ]
    for label, values in per.items():
        lines.append(
            f"| {label} | "
            + " | ".join(cell(values.get(g), by_group.get(label, {}).get(str(g))) for g in groups)
            + " |"
        )
    rr, butd = per.get("BUTR+RR"), per.get("BUTD")
    if rr and butd:
        ratios = []
        for g in groups:
            a, b = rr.get(g), butd.get(g)
            ratios.append(f"{a / b:.2f}×" if a is not None and b else "—")
        lines.append("| BUTR+RR / BUTD | " + " | ".join(ratios) + " |")
    counts, silent = [], []
    for label, entries in collected["rows"].items():
        if label not in per:
            continue
        hits = cases = none = n_pairs = 0
        for g, c, r in entries:
            pairs = find_result(collected["raw"][f"group{g}/test"]["results"], c, r)["per_pair"] or {}
            hits += sum(int(p["hits"]["5"]) for p in pairs.values())
            cases += sum(int(p["images"]) for p in pairs.values())
            none += sum(1 for p in pairs.values() if p["images"] and not int(p["hits"]["5"]))
            n_pairs += sum(1 for p in pairs.values() if p["images"])
        counts.append(f"{label} {hits}")
        silent.append(f"{label} {none}")
    if counts:
        lines += [
            "",
            f"These means rest on few events: hits at K = 5 over all (held-out pair, image) cases — "
            f"{', '.join(counts)} (of {cases} cases per row) — and on one training run per model. "
            f"Held-out pairs with no hit at all at K = 5 — {', '.join(silent)} (of {n_pairs} pairs).",
        ]
    return lines


def selected_epochs(collected: dict[str, Any]) -> dict[str, str]:
    """Table row → the selected epoch of each of its captioners (in group order), e.g. "5,4,5,5"."""
    by_name = {c["captioner"]: c for c in collected.get("selection") or []}
    out: dict[str, str] = {}
    for label, entries in collected["rows"].items():
        names = dict.fromkeys(captioner for _, captioner, _ in entries)  # FULL repeats one captioner
        picked = [by_name[n]["selected_epoch"] for n in names if n in by_name]
        if picked and all(e is not None for e in picked):
            out[label] = ",".join(str(e) for e in picked)
    return out


def weight_table(sweep: dict[str, Any], chosen: float) -> list[str]:
    """Markdown rows of a re-ranking weight sweep: Recall@5 and in-distribution CIDEr-D per order."""
    rows = sweep["rows"]
    lines = [
        "| order of the B candidates | R@5 (Test Comb) | CIDEr-D (Test no Comb) | CIDEr-D vs BUTD |",
        "|---|---|---|---|",
    ]
    base = rows["baseline"]["cider_d_no_comb"]
    names = {"baseline": "BUTD, beam 5 (reference)", "likelihood": "captioner alone (top 5 of B by log-prob)"}
    for key, v in rows.items():
        label = names.get(key) or f"ranker + {key} × log-prob" + (
            " **(chosen)**" if float(key) == chosen else ""
        )
        if key == "0":
            label = "ranker alone (Nikolaus et al., 2019)" + (" **(chosen)**" if chosen == 0.0 else "")
        gap = (v["cider_d_no_comb"] - base) / base
        lines.append(
            f"| {label} | {pct(v['recall_at_5'])} | {pct(v['cider_d_no_comb'])} | {100 * gap:+.1f}% |"
        )
    return lines
