"""``compcap-lab seeds``: does the reproduction's answer to "re-ranking or joint training?" survive
other training seeds? One held-out group's BUTD, BUTR and VSE++ are retrained on more training seeds —
the same training world, split and frozen visual encoder as the zoo (``build_zoo(train_seed=...)``: only
initialisation and batch order change) — and each seed's models are evaluated exactly as the
reproduction evaluates the zoo (``report.collect``: the zoo's evaluation world, beam 5, re-ranked rows
B = 100 with the report's λ). The zoo itself is the first seed; its figures come from the reproduction
(``reproduction.json``), so the seeds' table and the report agree on it.

Per seed and row: mean Recall@5 on the held-out pairs with its 95% interval, in-distribution CIDEr-D;
across seeds: mean, standard deviation and range; paired tests (BUTR+RR against the control BUTD+VSE++,
and against BUTD) per seed and pooled over seeds (every seed's (pair, image) cases, pairs as groups).
Written as ``seeds.json``, ``seeds.md`` and ``seeds.png``; the seed repositories as
``<zoo>.seed<N>`` beside the zoo.

``compcap-lab seeds --repo model_zoo --seeds 1 2 --out reports`` (after ``make models`` and ``make report``)
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compcap_lab.studies.report.collect import collect
from compcap_lab.studies.report.summary import summarise
from compcap_lab.studies.report.uncertainty import (
    PAIRED_METHOD,
    difference_text,
    intervals,
    paired_units,
    verdict,
)
from service.evaluation.intervals import paired_test

ROWS = ("BUTD", "BUTR", "BUTR+RR", "BUTD+VSE++", "BUTD+BUTR head")
COMPARE = (("BUTR+RR", "BUTD+VSE++"), ("BUTR+RR", "BUTD"), ("BUTD+VSE++", "BUTD"))


def seed_repo(zoo: Path, seed: int) -> Path:
    """Where seed ``seed``'s repository lies: ``<zoo>.seed<seed>`` beside the zoo."""
    return zoo.with_name(f"{zoo.name}.seed{seed}")


def train_seed_repo(zoo: Path, seed: int, group: int) -> Path:
    """Seed ``seed``'s BUTD, BUTR and VSE++ of ``group``, trained on the zoo's world, split and encoder
    (read from the zoo's build report) and packaged without probe sets; kept when already built."""
    from compcap_lab.pipeline.zoo import build_zoo

    out = seed_repo(zoo, seed)
    built = out / "build_report.json"
    if built.is_file() and json.loads(built.read_text(encoding="utf-8")).get("train_seed") == seed:
        return out
    zoo_build = json.loads((zoo / "build_report.json").read_text(encoding="utf-8"))
    build_zoo(
        out,
        preset=zoo_build["preset"],
        seed=zoo_build["seed"],
        work=zoo.with_name(zoo.name + ".work"),
        groups=(group,),
        eval_seed=zoo_build["eval_seed"],
        train_seed=seed,
        plan=[("butd", group), ("butr", group)],
        probe_sets=False,
    )
    return out


def restrict(collected: dict[str, Any], group: int) -> dict[str, Any]:
    """``ROWS`` of ``collected`` (a report's data) on ``group`` alone."""
    rows = {
        label: [e for e in collected["rows"][label] if e[0] == group]
        for label in ROWS
        if label in collected["rows"]
    }
    raw = {k: v for k, v in collected["raw"].items() if k.startswith(f"group{group}/")}
    return {"rows": {k: v for k, v in rows.items() if v}, "raw": raw}


def seed_figures(collected: dict[str, Any], group: int) -> dict[str, Any]:
    """One seed's figures: per row R@5 with its interval and in-distribution CIDEr-D and BLEU-4; the
    paired tests of ``COMPARE``."""
    table = summarise(collected, [group])
    found = intervals(collected)
    rows = {
        label: {
            "recall_at_5": found["recall_at_k"][label]["5"],
            "cider_d_no_comb": table[label]["test_no_comb"]["cider_d"],
            "bleu4_no_comb": table[label]["test_no_comb"]["bleu4"],
        }
        for label in ROWS
        if label in table
    }
    paired = {
        f"{a} vs {b}": found["paired"][f"{a} vs {b}"] for a, b in COMPARE if f"{a} vs {b}" in found["paired"]
    }
    return {"rows": rows, "paired": paired}


def across_seeds(per_seed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per row: mean, sample standard deviation, min and max of mean Recall@5 over the seeds."""
    out: dict[str, Any] = {}
    for label in ROWS:
        values = [
            s["rows"][label]["recall_at_5"]["estimate"] for s in per_seed.values() if label in s["rows"]
        ]
        if values:
            out[label] = {
                "seeds": len(values),
                "mean": statistics.fmean(values),
                "sd": statistics.stdev(values) if len(values) > 1 else None,
                "min": min(values),
                "max": max(values),
            }
    return out


def pooled_tests(collected: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``COMPARE``'s paired tests over every seed's cases at once (each seed's held-out pairs are groups
    of their own: the difference is the mean over seeds and pairs)."""
    out: dict[str, Any] = {}
    for a, b in COMPARE:
        units_a: list[list[float]] = []
        units_b: list[list[float]] = []
        for c in collected:
            if a in c["rows"] and b in c["rows"]:
                ua, ub = paired_units(c, a, b)
                units_a += ua
                units_b += ub
        test = paired_test(units_a, units_b) if units_a else None
        if test is not None:
            out[f"{a} vs {b}"] = test.as_dict()
    return out


def run_seeds(
    zoo: Path, seeds: Sequence[int], out: Path, group: int = 1, data: Path | None = None
) -> dict[str, Any]:
    """Train (where missing) and evaluate ``seeds`` besides the zoo's own, then write the report."""
    reproduction = json.loads((out / "reproduction.json").read_text(encoding="utf-8"))
    weight = float(reproduction["rerank"]["weight"])
    zoo_build = json.loads((zoo / "build_report.json").read_text(encoding="utf-8"))
    data = data or zoo.with_name(zoo.name + ".work") / "data" / f"eval_{zoo_build['eval_seed']}"
    collected = {str(zoo_build.get("train_seed", zoo_build["seed"])): restrict(reproduction, group)}
    for seed in seeds:
        repo = train_seed_repo(zoo, seed, group)
        evaluated = collect(repo, data, [group], out / "seeds" / f"seed{seed}", rerank_weight=weight)
        collected[str(seed)] = restrict(evaluated, group)
    per_seed = {s: seed_figures(c, group) for s, c in collected.items()}
    report = {
        "group": group,
        "eval_data": str(data),
        "rerank_weight": weight,
        "rerank_beam": reproduction["rerank"]["beam"],
        "zoo": str(zoo),
        "paired_method": PAIRED_METHOD,
        "per_seed": per_seed,
        "across": across_seeds(per_seed),
        "pooled": pooled_tests(list(collected.values())),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    seeds_plot(report, out / "seeds.png")
    (out / "seeds.md").write_text(markdown(report), encoding="utf-8")
    return report


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _iv(found: dict[str, Any]) -> str:
    return f"{100 * found['estimate']:.1f} [{100 * found['low']:.1f}, {100 * found['high']:.1f}]"


def _diff(test: dict[str, Any]) -> str:
    return f"{difference_text(test['difference'])}, p = {test['p_value']:.3g}"


def markdown(report: dict[str, Any]) -> str:
    """``seeds.md`` from ``seeds.json``."""
    seeds = list(report["per_seed"])
    g = report["group"]
    lines = [
        f"# Training seeds: held-out group {g}",
        "",
        f"BUTD, BUTR and VSE++ of group {g} trained on {len(seeds)} training seeds ({', '.join(seeds)}; the "
        "first is the model zoo's), each on the same training world, split and frozen visual encoder, "
        f"evaluated on the same evaluation world (`{report['eval_data']}`) exactly as the reproduction: "
        f"beam 5; re-ranked rows decode B = {report['rerank_beam']} beams and order them by ranker cosine + "
        f"{report['rerank_weight']:g} × normalised log-prob. BUTD+VSE++ and BUTD+BUTR head are the control "
        "rows: BUTD's beams re-ranked by a ranker not trained with it. Generated by `compcap-lab seeds`.",
        "",
        "## Mean Recall@5 on the held-out pairs (×100, 95% interval) and in-distribution CIDEr-D",
        "",
        "| row | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd over seeds [min, max] |",
        "|---" * (len(seeds) + 2) + "|",
    ]
    for label, spread in report["across"].items():
        cells = []
        for s in seeds:
            row = report["per_seed"][s]["rows"].get(label)
            cells.append(f"{_iv(row['recall_at_5'])}; CIDEr-D {_pct(row['cider_d_no_comb'])}" if row else "—")
        sd = "—" if spread["sd"] is None else f"{100 * spread['sd']:.1f}"
        lines.append(
            f"| {label} | " + " | ".join(cells) + f" | {100 * spread['mean']:.1f} ± {sd} "
            f"[{100 * spread['min']:.1f}, {100 * spread['max']:.1f}] |"
        )
    lines += [
        "",
        "## Paired tests (difference a − b in mean Recall@5 ×100, 95% interval, p-value)",
        "",
        report["paired_method"] + " Pooled: every seed's cases at once, each seed's pairs as groups.",
        "",
        "| comparison | " + " | ".join(f"seed {s}" for s in seeds) + " | pooled over seeds |",
        "|---" * (len(seeds) + 2) + "|",
    ]
    for name, pooled in report["pooled"].items():
        cells = [
            _diff(report["per_seed"][s]["paired"][name]) if name in report["per_seed"][s]["paired"] else "—"
            for s in seeds
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_diff(pooled)} |")
    lines += [
        "",
        "## What this supports",
        "",
        "At the 5% level: higher / lower when the interval excludes 0 and p < 0.05; mixed when only one",
        "does (the permutation test takes the seed's pairs as given, the interval resamples them).",
        "",
    ]
    for name, pooled in report["pooled"].items():
        per = [
            verdict(report["per_seed"][s]["paired"][name])
            for s in seeds
            if name in report["per_seed"][s]["paired"]
        ]
        lines.append(f"- {name}: pooled {verdict(pooled)} ({_diff(pooled)}); per seed: {', '.join(per)}.")
    lines += ["", "![Recall@5 per training seed](seeds.png)", ""]
    return "\n".join(lines)


def seeds_plot(report: dict[str, Any], path: Path) -> None:
    """Mean Recall@5 per row and seed with its interval, the seeds' mean as a bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(report["across"])
    seeds = list(report["per_seed"])
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.bar(
        range(len(labels)),
        [100 * report["across"][r]["mean"] for r in labels],
        color="#dddddd",
        label="mean over seeds",
    )
    for j, s in enumerate(seeds):
        xs, ys, lo, hi = [], [], [], []
        for i, label in enumerate(labels):
            row = report["per_seed"][s]["rows"].get(label)
            if row:
                iv = row["recall_at_5"]
                xs.append(i + (j - (len(seeds) - 1) / 2) * 0.2)
                ys.append(100 * iv["estimate"])
                lo.append(100 * (iv["estimate"] - iv["low"]))
                hi.append(100 * (iv["high"] - iv["estimate"]))
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=f"seed {s} (95% interval)")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("mean Recall@5, held-out pairs (%)")
    ax.set_title(f"Group {report['group']}: re-ranking or joint training, per training seed", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["markdown", "run_seeds", "seed_repo", "train_seed_repo"]
