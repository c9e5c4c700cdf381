"""The counterfactual probe offline: every minimal pair of a repository's counterfactual probe set
(``compcap probesets --kind counterfactual``) decoded in process through the served engine path, top-K
captions parsed by the attachment checker, and the live kind's result
(``service.probes.scoring.counterfactual``) per run, written as ``counterfactual.json``, ``counterfactual.md``
and a bar plot of the top-1 outcome shares, held-out against seen, with 95% intervals.

``compcap-lab counterfactual --repo model_repo --runs butr butr+butr butd --out reports``
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from compcap_lab.studies.report.family import PERMUTATIONS, at_floor, count_text, floor_bound, verdict
from export.packaging.decoding import decode, open_engine
from service.manifest import load_manifest
from service.probes.scoring.counterfactual import KS, MISS_CLASSES, OUTCOMES, counterfactual_result
from service.probesets import ProbeSet, load_probe_set
from service.text.concepts import ConceptPair

LABELS = {
    "hit": "hit",
    "modifier_elsewhere": "modifier on another object",
    "noun_missing": "noun missing",
    "wrong_value": "wrong value",
    "modifier_omitted": "modifier omitted",
}


def parse_run(text: str) -> tuple[str, str | None]:
    """``captioner`` or ``captioner+ranker`` (re-ranked)."""
    model, _, ranker = text.partition("+")
    if not model:
        raise ValueError(f"a run is CAPTIONER or CAPTIONER+RANKER, got {text!r}")
    return model, ranker or None


async def _decode_runs(
    repo: Path, pixels: np.ndarray, runs: list[tuple[str, str | None]], beam_size: int
) -> dict[str, tuple[list[list[str]], float]]:
    out: dict[str, tuple[list[list[str]], float]] = {}
    async with await open_engine(repo) as engine:
        for model, ranker in runs:
            name = model + (f"+{ranker}" if ranker else "")
            params = engine.resolve(model=model, rerank=ranker or False, beam_size=beam_size, n_best=KS[-1])
            t0 = time.perf_counter()
            captions = await decode(engine, pixels, params, name)
            out[name] = ([[c.text for c in per] for per in captions], time.perf_counter() - t0)
    return out


def run_counterfactual(
    repo: Path,
    out: Path,
    runs: list[str],
    probe_set: str = "counterfactual",
    beam_size: int = 5,
    images: int | None = None,
) -> dict[str, Any]:
    """Score ``runs`` (``captioner`` or ``captioner+ranker``) on the repository's counterfactual set
    (at most ``images`` minimal pairs per pair); write the reports into ``out``."""
    from service.text.attachment import AttachmentChecker

    repo, out = Path(repo), Path(out)
    manifest = load_manifest(repo)
    folder = repo / "probes" / probe_set
    if not (folder / "probe.json").is_file():
        raise FileNotFoundError(
            f"{folder} has no probe set: write it with "
            f"`compcap probesets --repo {repo} --kind counterfactual`"
        )
    probe: ProbeSet = load_probe_set(folder)
    entries = probe.minimal_pairs()
    minimal = {e.pair.label: list(e.minimal_pairs[:images] if images else e.minimal_pairs) for e in entries}
    ids = [i for v in minimal.values() for m in v for i in (m.held_out, m.seen)]
    parsed_runs = [parse_run(r) for r in runs]
    pixels = probe.images(ids, manifest.image.height, manifest.image.width)
    decoded = asyncio.run(_decode_runs(repo, pixels, parsed_runs, beam_size))
    checker = AttachmentChecker()
    results: dict[str, Any] = {}
    for (model, _), (name, (captions, seconds)) in zip(parsed_runs, decoded.items(), strict=True):
        generated = dict(zip(ids, captions, strict=True))
        texts = sorted({c for per in captions for c in per})
        attached = dict(zip(texts, checker.pairs_batch(texts), strict=True))
        training = manifest.captioner(model).training
        held = (
            frozenset(ConceptPair(p.kind, p.modifier, p.noun) for p in training.held_out_pairs)
            if training.held_out_known
            else None
        )
        result = counterfactual_result(entries, minimal, generated, attached, probe.scenes or {}, held)
        result["decode_seconds"] = round(seconds, 1)
        result["examples"] = _examples(entries, minimal, generated)
        results[name] = result
    report = {
        "repo": str(repo),
        "probe_set": probe.name,
        "world_seed": probe.info.get("world_seed"),
        "held_out_of": probe.info.get("held_out_of"),
        "beam_size": beam_size,
        "images": len(ids),
        "minimal_pairs_per_pair": {k: len(v) for k, v in minimal.items()},
        "runs": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "counterfactual.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    plot(report, out / "counterfactual.png")
    (out / "counterfactual.md").write_text(markdown(report), encoding="utf-8")
    return report


def _examples(entries: Any, minimal: dict[str, list[Any]], generated: dict[int, list[str]]) -> list[Any]:
    """The first minimal pair of each pair: both top-1 captions."""
    out = []
    for e in entries:
        if minimal[e.pair.label]:
            m = minimal[e.pair.label][0]
            out.append(
                {
                    "pair": e.pair.label,
                    "seen": f"{m.seen_value} {e.pair.noun}",
                    "held_out_caption": generated[m.held_out][0],
                    "seen_caption": generated[m.seen][0],
                }
            )
    return out


def _pct(part: dict[str, Any] | None, key: str, figure: str, sub: str) -> str:
    if not part:
        return "-"
    value = part[key].get(sub)
    interval = part[figure].get(sub)
    if value is None:
        return "-"
    if not interval:
        return f"{100 * value:.1f}"
    return f"{100 * value:.1f} [{100 * interval['low']:.1f}, {100 * interval['high']:.1f}]"


def _diff(test: dict[str, Any] | None) -> str:
    """A paired cell: the difference with its interval and p-value — at the permutation floor a bound
    (``report.family``) — and "mixed" where the verdict rule gives it (a small p, an interval spanning 0)."""
    if not test:
        return "-"
    d = test["difference"]
    low, high = 100 * d["low"], 100 * d["high"]
    n = int(test.get("permutations") or PERMUTATIONS)
    p = f"p < {floor_bound(n):.1g}" if at_floor(test["p_value"], n) else f"p = {test['p_value']:.4f}"
    mixed = ", mixed" if verdict(test) == "mixed" else ""
    return f"{100 * d['estimate']:+.1f} [{low:+.1f}, {high:+.1f}], {p}{mixed}"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Counterfactual minimal pairs",
        "",
        f"Repository `{report['repo']}`, probe set `{report['probe_set']}` (SceneWorld probe world seed "
        f"{report['world_seed']}): for each held-out pair of `{report['held_out_of']}`, minimal pairs of a "
        "scene with a seen pair's object and the same scene with exactly that object's colour, size or "
        "action set to the held-out value (same layout, same other objects, pixel-identical elsewhere). "
        f"{report['images']} images, beam {report['beam_size']}; minimal pairs per pair: "
        + ", ".join(f"{k} {v}" for k, v in report["minimal_pairs_per_pair"].items())
        + ".",
        "",
        "Hit@K: one of the top-K captions attaches the side's pair (the attachment checker). Every top-1 "
        "caption is a hit or one miss class, by the scene graph, the first that applies: *modifier on "
        "another object* (attached to another noun of the scene that does not have it), *noun missing*, "
        "*wrong value* (the noun with another colour / size / verb), *modifier omitted*. Figures are "
        "percentages, means over pairs with their 95% two-stage bootstrap intervals (pairs, then minimal "
        "pairs); held-out − seen is a paired test on the same scenes (sign-flip permutation p-value). "
        f'"p < {floor_bound(PERMUTATIONS):.1g}" is the permutation floor: none of the '
        f"{count_text(PERMUTATIONS)} sign flips reached the observed difference. *mixed* by the "
        "reports' verdict rule: the p-value, which takes these pairs as given, is below 0.05 but the "
        "interval over pairs spans 0 (or the reverse).",
        "",
        "![top-1 outcomes, held-out vs seen](counterfactual.png)",
        "",
    ]
    for name, r in report["runs"].items():
        held, seen = r["held_out"], r["seen"]
        lines += [
            f"## {name}",
            "",
            f"{r['minimal_pairs']} minimal pairs over {held['pairs']} pairs; "
            f"decoded in {r['decode_seconds']} s.",
            "",
            "| figure | held-out | seen | held-out − seen (paired) |",
            "|---|---|---|---|",
        ]
        for k in [str(k) for k in r["ks"]]:
            lines.append(
                f"| hit@{k} | {_pct(held, 'recall', 'recall_interval', k)} | "
                f"{_pct(seen, 'recall', 'recall_interval', k)} | {_diff(r['difference']['recall'][k])} |"
            )
        for o in MISS_CLASSES:
            lines.append(
                f"| top-1 {LABELS[o]} | {_pct(held, 'outcomes', 'outcome_intervals', o)} | "
                f"{_pct(seen, 'outcomes', 'outcome_intervals', o)} | "
                f"{_diff(r['difference']['outcomes'][o])} |"
            )
        half = held["recall_interval"]["1"]
        if half:
            lines += [
                "",
                f"Half-width of the held-out hit@1 interval: {100 * (half['high'] - half['low']) / 2:.1f} "
                "points (between-pair spread included: 6 pairs are resampled too).",
            ]
        lines += [
            "",
            "| pair | side | n | hit@1 | hit@5 | " + " | ".join(LABELS[o] for o in MISS_CLASSES) + " |",
        ]
        lines.append("|---|---|---|---|---|" + "---|" * len(MISS_CLASSES))
        for row in r["pairs"]:
            part = {
                "recall": row["recall"],
                "recall_interval": row["recall_interval"],
                "outcomes": row["outcomes"],
                "outcome_intervals": row["outcome_intervals"],
            }
            lines.append(
                f"| {row['pair']} | {row['side'].replace('_', '-')} | {row['images']} | "
                f"{_pct(part, 'recall', 'recall_interval', '1')} | "
                f"{_pct(part, 'recall', 'recall_interval', '5')} | "
                + " | ".join(f"{100 * row['outcomes'][o]:.1f}" for o in MISS_CLASSES)
                + " |"
            )
        lines += ["", "Examples (top-1 of the first minimal pair of each pair):", ""]
        for ex in r["examples"]:
            lines.append(
                f"- {ex['pair']}: “{ex['held_out_caption']}” — "
                f"seen twin ({ex['seen']}): “{ex['seen_caption']}”"
            )
        lines.append("")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Grouped bars: top-1 outcome shares, held-out vs seen, per run, with 95% interval error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(report["runs"].items())
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.4), squeeze=False, sharey=True)
    x = np.arange(len(OUTCOMES))
    for ax, (name, r) in zip(axes[0], runs, strict=True):
        for offset, side, colour in ((-0.2, "held_out", "#c0392b"), (0.2, "seen", "#2980b9")):
            part = r[side]
            values = np.array([100 * (part["outcomes"][o] or 0.0) for o in OUTCOMES])
            lows = np.array([100 * (part["outcome_intervals"][o] or {"low": 0})["low"] for o in OUTCOMES])
            highs = np.array([100 * (part["outcome_intervals"][o] or {"high": 0})["high"] for o in OUTCOMES])
            err = np.vstack([np.maximum(values - lows, 0), np.maximum(highs - values, 0)])
            ax.bar(x + offset, values, 0.4, yerr=err, capsize=2, color=colour, label=side.replace("_", "-"))
        ax.set_xticks(x, [LABELS[o].replace(" ", "\n", 1) for o in OUTCOMES], fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("share of top-1 captions (%)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["markdown", "parse_run", "plot", "run_counterfactual"]
