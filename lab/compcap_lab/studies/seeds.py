"""``compcap-lab seeds``: does the reproduction's answer to "re-ranking or joint training?" survive
other training seeds? One held-out group's BUTD, BUTR and VSE++ are retrained on more training seeds —
the same training world, split and frozen visual encoder as the zoo (``build_zoo(train_seed=...)``: only
initialisation and batch order change) — and each seed's models are evaluated exactly as the
reproduction evaluates the zoo (``report.collect``: the zoo's evaluation world, beam 5, re-ranked rows
B = 100 with the report's λ). The zoo itself is the first seed; its figures come from the reproduction
(``reproduction.json``), so the seeds' table and the report agree on it.

Per seed and row: mean Recall@5 on the held-out pairs with its 95% interval, in-distribution CIDEr-D;
across seeds: mean, standard deviation and range; the reproduction's five paired tests (``PAIRED``:
BUTR+RR against the controls and BUTD, the two rankers head on) per seed and pooled over seeds. Pooled,
the seeds share the group's held-out pairs and their images, so the pooled interval is a cluster
bootstrap over the pairs (``uncertainty.cluster_interval``: pairs, then images, every seed kept); the
p-value flips every (seed, pair, image) case. Every test of the report is one family, Holm-adjusted.
Written as ``seeds.json`` (with the per-case files its figures are recomputed from, ``evaluations``),
``seeds.md`` and ``seeds.png``; each seed's evaluations under ``seeds/seed<N>/``; the seed repositories
as ``<zoo>.seed<N>`` beside the zoo. ``reanalyse`` recomputes the report from those stored evaluations
(no model, no data).

``compcap-lab seeds --repo model_zoo --seeds 1 2 --out reports`` (after ``make models`` and ``make report``)
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compcap_lab.studies.report.collect import SETS, collect
from compcap_lab.studies.report.family import (
    VERDICTS,
    holm_texts,
    holm_values,
    holm_verdict,
    p_phrase,
    verdict,
)
from compcap_lab.studies.report.markdown import floor_note
from compcap_lab.studies.report.summary import summarise
from compcap_lab.studies.report.uncertainty import (
    PAIRED,
    PAIRED_METHOD,
    cluster_interval,
    difference_text,
    family,
    intervals,
    paired_cases,
    paired_units,
)
from service.evaluation.intervals import PairedTest, paired_test

ROWS = ("BUTD", "BUTR", "BUTR+RR", "BUTD+VSE++", "BUTD+BUTR head")
COMPARE = PAIRED  # the reproduction's paired tests, per seed and pooled
POOLED_METHOD = (
    "Pooled: every seed's cases at once; the difference is the mean over the held-out pairs of the "
    "mean over seeds. The seeds share the group's held-out pairs and their images, so the pairs are "
    "clusters: the interval resamples the pairs with replacement and, within each drawn pair, its "
    "images (one draw for every seed, which see the same images), every seed kept (2000 resamples, "
    "seed 0): an interval over other pairs and images for these training runs, not over other training "
    "seeds (the per-seed columns show that spread); the p-value flips the sign of every (seed, pair, "
    "image) case (10 000 flips)."
)


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


def independent_tests(collected: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``COMPARE``'s paired tests over every seed's cases at once with each seed's held-out pairs as
    groups of their own (the difference is the mean over seeds and pairs) — as if the seeds' pairs were
    independent, which they are not (``pooled_tests``); kept for comparison."""
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


def _images(collected: dict[str, Any], row: str) -> dict[tuple[int, str], list[str]]:
    """(group, pair) → the image ids row ``row`` was scored on, sorted (the order of ``paired_cases``)."""
    out: dict[tuple[int, str], list[str]] = {}
    for g, cap, ranker in collected["rows"][row]:
        for result in collected["raw"][f"group{g}/test"]["results"]:
            if result["captioner"] == cap and result["ranker"] == ranker:
                for label, pair in (result.get("per_pair") or {}).items():
                    out[(g, label)] = sorted(pair.get("first_rank") or {})
    return out


def pooled_tests(
    collected: Sequence[dict[str, Any]], compare: Sequence[tuple[str, str]] = COMPARE
) -> dict[str, Any]:
    """``compare``'s paired tests (default ``COMPARE``) over every seed's cases at once
    (``PairedTest.as_dict``): the difference a − b is the mean over the held-out pairs of the mean over
    seeds, its interval a cluster bootstrap over the pairs the seeds share (``cluster_interval``:
    ``groups`` = pairs, ``units`` = seed × image cases), its p-value the sign-flip test over every (seed,
    pair, image) case. A comparison is left out unless every seed has both rows with stored first ranks
    on the same pairs and images."""
    out: dict[str, Any] = {}
    for a, b in compare:
        if not collected or any(a not in c["rows"] or b not in c["rows"] for c in collected):
            continue
        per_seed = [paired_cases(c, a, b) for c in collected]
        if not all(per_seed):
            continue
        keys = list(per_seed[0])
        images = [_images(c, a) for c in collected]
        if any(list(cases) != keys for cases in per_seed) or any(i != images[0] for i in images):
            raise ValueError(f"{a} vs {b}: the seeds were not scored on the same pairs and images")
        clusters = [[[x - y for x, y in zip(*cases[key], strict=True)] for cases in per_seed] for key in keys]
        units_a = [cases[key][0] for cases in per_seed for key in keys]
        units_b = [cases[key][1] for cases in per_seed for key in keys]
        test = paired_test(units_a, units_b)
        interval = cluster_interval(clusters)
        if test is not None and interval is not None:
            out[f"{a} vs {b}"] = PairedTest(interval, test.p_value, test.permutations).as_dict()
    return out


def family_tests(report: dict[str, Any]) -> dict[str, Any]:
    """The report's family: every paired test it prints, "seed <s>: a vs b" and "pooled: a vs b"."""
    tests: dict[str, Any] = {}
    for name in report["pooled"]:
        for s, figures in report["per_seed"].items():
            if name in figures["paired"]:
                tests[f"seed {s}: {name}"] = figures["paired"][name]
        tests[f"pooled: {name}"] = report["pooled"][name]
    return tests


def build_report(
    collected: dict[str, dict[str, Any]], group: int, meta: dict[str, Any], evaluations: dict[str, Any]
) -> dict[str, Any]:
    """``seeds.json`` from each seed's evaluations (seed → ``restrict``-ed report data): ``meta`` (group,
    eval_data, rerank_weight, rerank_beam, zoo), ``evaluations`` (seed → where its per-case data lie,
    relative to the report folder, and its rows)."""
    per_seed = {s: seed_figures(c, group) for s, c in collected.items()}
    report = {
        **meta,
        "group": group,
        "paired_method": PAIRED_METHOD,
        "pooled_method": POOLED_METHOD,
        "evaluations": evaluations,
        "per_seed": per_seed,
        "across": across_seeds(per_seed),
        "pooled": pooled_tests(list(collected.values())),
        "pooled_independent": independent_tests(list(collected.values())),
    }
    report["family"] = family(family_tests(report), "every paired test of this report, per seed and pooled")
    return report


def _stored(folder: Path, group: int) -> dict[str, Any]:
    """A seed's evaluations as ``collect`` wrote them: ``group<g>/<set>`` → the result JSON."""
    files = {s: folder / f"systematicity_{group}_{s}.json" for s in SETS}
    return {f"group{group}/{s}": json.loads(path.read_text(encoding="utf-8")) for s, path in files.items()}


def reanalyse(out: Path) -> dict[str, Any]:
    """Recompute ``seeds.json`` and ``seeds.md`` in ``out`` from the evaluations they rest on — the zoo's
    seed from ``reproduction.json``, every other seed from ``seeds/seed<N>/systematicity_<g>_*.json`` —
    without the models or the data; the seeds, group and settings from the ``seeds.json`` there. A
    report written before ``evaluations`` was stored takes each seed's rows from the reproduction's
    (the seed repositories name their models as the zoo does)."""
    old = json.loads((out / "seeds.json").read_text(encoding="utf-8"))
    reproduction = json.loads((out / "reproduction.json").read_text(encoding="utf-8"))
    group = int(old["group"])
    seeds = list(old["per_seed"])
    stored = old.get("evaluations") or {}
    zoo_rows = restrict(reproduction, group)["rows"]
    collected: dict[str, dict[str, Any]] = {}
    evaluations: dict[str, Any] = {}
    for i, s in enumerate(seeds):
        source = (stored.get(s) or {}).get("source") or ("reproduction.json" if i == 0 else f"seeds/seed{s}")
        if source == "reproduction.json":
            collected[s] = restrict(reproduction, group)
        else:
            rows = (stored.get(s) or {}).get("rows") or zoo_rows
            collected[s] = restrict({"rows": rows, "raw": _stored(out / source, group)}, group)
        evaluations[s] = {"source": source, "rows": collected[s]["rows"]}
    meta = {k: old[k] for k in ("eval_data", "rerank_weight", "rerank_beam", "zoo")}
    report = build_report(collected, group, meta, evaluations)
    (out / "seeds.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "seeds.md").write_text(markdown(report), encoding="utf-8")
    return report


def run_seeds(
    zoo: Path, seeds: Sequence[int], out: Path, group: int = 1, data: Path | None = None
) -> dict[str, Any]:
    """Train (where missing) and evaluate ``seeds`` besides the zoo's own, then write the report."""
    reproduction = json.loads((out / "reproduction.json").read_text(encoding="utf-8"))
    weight = float(reproduction["rerank"]["weight"])
    zoo_build = json.loads((zoo / "build_report.json").read_text(encoding="utf-8"))
    data = data or zoo.with_name(zoo.name + ".work") / "data" / f"eval_{zoo_build['eval_seed']}"
    first = str(zoo_build.get("train_seed", zoo_build["seed"]))
    collected = {first: restrict(reproduction, group)}
    evaluations: dict[str, Any] = {first: {"source": "reproduction.json", "rows": collected[first]["rows"]}}
    for seed in seeds:
        repo = train_seed_repo(zoo, seed, group)
        folder = out / "seeds" / f"seed{seed}"
        evaluated = collect(repo, data, [group], folder, rerank_weight=weight)
        collected[str(seed)] = restrict(evaluated, group)
        evaluations[str(seed)] = {"source": f"seeds/seed{seed}", "rows": collected[str(seed)]["rows"]}
    meta = {
        "eval_data": str(data),
        "rerank_weight": weight,
        "rerank_beam": reproduction["rerank"]["beam"],
        "zoo": str(zoo),
    }
    report = build_report(collected, group, meta, evaluations)
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    seeds_plot(report, out / "seeds.png")
    (out / "seeds.md").write_text(markdown(report), encoding="utf-8")
    return report


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _iv(found: dict[str, Any]) -> str:
    return f"{100 * found['estimate']:.1f} [{100 * found['low']:.1f}, {100 * found['high']:.1f}]"


def _diff(test: dict[str, Any], holm: str | None = None) -> str:
    adjusted = f", Holm {holm}" if holm is not None else ""
    return f"{difference_text(test['difference'])}, {p_phrase(test, count=False)}{adjusted}"


def joint_training(report: dict[str, Any], holm: dict[str, str]) -> list[str]:
    """What the seeds say about joint training: BUTR+RR against BUTD+VSE++ pooled (its interval's bounds:
    an absence of evidence when it spans 0), how many seeds favour each, the smallest per-seed p-value
    with its verdict, and the two rankers head on."""
    main, head = "BUTR+RR vs BUTD+VSE++", "BUTD+BUTR head vs BUTD+VSE++"
    pooled = report["pooled"].get(main)
    if pooled is None:
        return []
    d = pooled["difference"]
    control = (report["across"].get("BUTD+VSE++") or {}).get("mean")
    share = f" ({100 * d['high'] / control:.0f}% of BUTD+VSE++'s {100 * control:.1f})" if control else ""
    v = verdict(pooled)
    said = {
        "not significant": "no difference is detected — an absence of evidence, not evidence that joint "
        f"training adds nothing: the interval allows up to {100 * d['high']:+.1f} points in BUTR+RR's "
        f"favour{share}.",
        "higher": "BUTR+RR is higher.",
        "lower": "BUTD+VSE++ is higher.",
        "mixed": "not settled: " + VERDICTS["mixed"] + ".",
    }[v]
    per = {s: f["paired"][main] for s, f in report["per_seed"].items() if main in f["paired"]}
    ahead = [s for s, t in per.items() if t["difference"]["estimate"] > 0]
    text = (
        f"**Joint training.** Pooled over {len(report['per_seed'])} seeds, BUTR+RR − BUTD+VSE++ = "
        f"{_diff(pooled, holm[f'pooled: {main}'])}: {said} "
        f"{len(ahead)} of {len(per)} seeds' estimates favour BUTR+RR ("
        + ", ".join(f"seed {s} {difference_text(t['difference']).split(' ')[0]}" for s, t in per.items())
        + ")"
    )
    if per:
        s, t = min(per.items(), key=lambda item: item[1]["p_value"])
        text += (
            f"; the smallest per-seed p-value, seed {s}'s {p_phrase(t, count=False)}, is "
            f"{verdict(t)} at the 5% level and {holm[f'seed {s}: {main}']} after Holm over the family"
        )
    text += "."
    if head in report["pooled"]:
        h = report["pooled"][head]
        favour = "the jointly trained head's" if h["difference"]["estimate"] > 0 else "VSE++'s"
        text += (
            " Head on, both rankers on the same BUTD beams (BUTD+BUTR head vs BUTD+VSE++), pooled: "
            f"{_diff(h, holm[f'pooled: {head}'])}, in {favour} favour ({verdict(h)})."
        )
    return ["", text]


def markdown(report: dict[str, Any]) -> str:
    """``seeds.md`` from ``seeds.json``."""
    seeds = list(report["per_seed"])
    g = report["group"]
    tests = family_tests(report)
    holm = holm_texts(tests)
    adjusted = holm_values(tests)
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
    permutations = max((int(t.get("permutations") or 10_000) for t in tests.values()), default=10_000)
    independent = (report.get("pooled_independent") or {}).get("BUTR+RR vs BUTD+VSE++")
    lines += [
        "",
        "## Paired tests (difference a − b in mean Recall@5 ×100, 95% interval, p-value, Holm-adjusted p)",
        "",
        report["paired_method"]
        + " "
        + report.get("pooled_method", "Pooled: every seed's cases at once, each seed's pairs as groups."),
        "",
        "| comparison | " + " | ".join(f"seed {s}" for s in seeds) + " | pooled over seeds |",
        "|---" * (len(seeds) + 2) + "|",
    ]
    for name, pooled in report["pooled"].items():
        cells = [
            _diff(report["per_seed"][s]["paired"][name], holm[f"seed {s}: {name}"])
            if name in report["per_seed"][s]["paired"]
            else "—"
            for s in seeds
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_diff(pooled, holm[f'pooled: {name}'])} |")
    lines += [
        "",
        f"The family: the {len(tests)} paired tests of this table ({len(report['pooled'])} comparisons, each "
        f"per seed and pooled). Holm–Bonferroni over it keeps the chance of any false “higher” or “lower” "
        "among them at 5%, whatever their dependence (the pooled test and the per-seed tests share their "
        "cases). " + floor_note(permutations),
    ]
    if independent:
        n_groups = independent["difference"]["groups"]
        lines += [
            "",
            f"Treating the {n_groups} seed × pair groups as independent, as this report did before, gives "
            f"BUTR+RR − BUTD+VSE++ = {difference_text(independent['difference'])}: they share "
            f"{report['pooled']['BUTR+RR vs BUTD+VSE++']['difference']['groups']} pairs and their images, "
            "so the pooled interval above resamples the pairs as clusters.",
        ]
    lines += [
        "",
        "## What this supports",
        "",
        "At the 5% level: higher / lower when the interval excludes 0 and p < 0.05; mixed when only one",
        "does (the permutation test takes the seed's pairs as given, the interval resamples them); after",
        "Holm, the same rule on the adjusted p-value.",
        "",
    ]
    for name, pooled in report["pooled"].items():
        per = [
            verdict(report["per_seed"][s]["paired"][name])
            for s in seeds
            if name in report["per_seed"][s]["paired"]
        ]
        after = [
            holm_verdict(report["per_seed"][s]["paired"][name], adjusted[f"seed {s}: {name}"])
            for s in seeds
            if name in report["per_seed"][s]["paired"]
        ]
        lines.append(
            f"- {name}: pooled {verdict(pooled)} ({_diff(pooled, holm[f'pooled: {name}'])}; after Holm "
            f"{holm_verdict(pooled, adjusted[f'pooled: {name}'])}); per seed: {', '.join(per)} (after Holm: "
            f"{', '.join(after)})."
        )
    lines += joint_training(report, holm)
    lines += ["", "![Recall@5 per training seed](seeds.png)", ""]
    return "\n".join(lines)


def seeds_plot(report: dict[str, Any], path: Path) -> None:
    """Mean Recall@5 per row and seed with its interval, the seeds' mean as a bar."""
    series = {
        f"seed {s} (95% interval)": {label: row["recall_at_5"] for label, row in figures["rows"].items()}
        for s, figures in report["per_seed"].items()
    }
    interval_plot(
        path,
        list(report["across"]),
        {label: spread["mean"] for label, spread in report["across"].items()},
        "mean over seeds",
        series,
        f"Group {report['group']}: re-ranking or joint training, per training seed",
    )


def interval_plot(
    path: Path,
    labels: Sequence[str],
    bars: dict[str, float],
    bar_label: str,
    series: dict[str, dict[str, dict[str, Any]]],
    title: str,
    bar_intervals: dict[str, dict[str, Any]] | None = None,
    lines: Sequence[tuple[float, str]] = (),
) -> None:
    """Mean Recall@5 (held-out pairs) per row of ``labels``: a grey bar (``bars``: row → fraction; with
    ``bar_intervals``, row → its interval, drawn as an error bar), and per series (legend label → row →
    interval dict) a point with its 95% interval beside it; ``lines``: (fraction, label) drawn as dashed
    horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    shown = [(i, label) for i, label in enumerate(labels) if label in bars]
    heights = [100 * bars[label] for _, label in shown]
    errors = None
    if bar_intervals is not None:
        found = [bar_intervals[label] for _, label in shown]
        errors = [
            [h - 100 * f["low"] for h, f in zip(heights, found, strict=True)],
            [100 * f["high"] - h for h, f in zip(heights, found, strict=True)],
        ]
    ax.bar([i for i, _ in shown], heights, yerr=errors, color="#dddddd", label=bar_label)
    for j, (name, rows) in enumerate(series.items()):
        xs, ys, lo, hi = [], [], [], []
        for i, label in enumerate(labels):
            iv = rows.get(label)
            if iv:
                xs.append(i + (j - (len(series) - 1) / 2) * 0.2)
                ys.append(100 * iv["estimate"])
                lo.append(100 * (iv["estimate"] - iv["low"]))
                hi.append(100 * (iv["high"] - iv["estimate"]))
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=name)
    for value, label in lines:
        ax.axhline(100 * value, linestyle="--", linewidth=1, color="#777777")
        ax.annotate(label, (len(labels) - 0.5, 100 * value), fontsize=7, ha="right", va="bottom")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("mean Recall@5, held-out pairs (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["markdown", "run_seeds", "seed_repo", "train_seed_repo"]
