"""Rendering of the grounding study (``compcap_lab.studies.explanations``): ``explanations.md`` with the table
shapes of Cornia et al. (2022) and which of their claims hold here, and ``explain_examples.png``
(per-word heat maps)."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from service.evaluation.intervals import binary_units, bootstrap_interval
from service.explain.render import overlay_png, stretch, upsample

DELTAS = ("0", "1", "3", "5", "inf")
GRADIENTS = ("saliency", "guided_backprop", "integrated_gradients")
LABEL = {
    "attention": "Attention",
    "saliency": "Saliency",
    "guided_backprop": "Guided Backprop",
    "integrated_gradients": "Integrated Gradients",
}


def _f(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _e(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def _pct(value: float | None) -> str:
    return _f(None if value is None else 100 * value, 1)


def _gs(report: dict[str, Any], name: str, method: str, delta: str) -> float | None:
    methods = report["captioners"][name]["methods"]
    return methods[method]["grounding_score"][delta] if method in methods else None


def pointing_interval(pointing: dict[str, Any]) -> dict[str, Any] | None:
    """The pointing game's 95% interval: the stored one, else a bootstrap over the nouns rebuilt from
    the stored accuracy and noun count (binary hits: their order does not matter; which caption each
    noun came from is not stored, so the nouns are resampled as independent units)."""
    if pointing.get("interval"):
        return dict(pointing["interval"])
    nouns, accuracy = pointing.get("nouns") or 0, pointing.get("accuracy")
    if not nouns or accuracy is None:
        return None
    found = bootstrap_interval([binary_units(round(accuracy * nouns), nouns)])
    return None if found is None else found.as_dict()


def background_caveat(report: dict[str, Any]) -> list[str]:
    """Why integrated gradients can lead the pointing game and trail on GroundingScore: the two count
    different nouns. The verdicts that rest on GroundingScore at δ = 0 are qualified by it."""
    caps = report["captioners"]
    if not all("integrated_gradients" in c["methods"] for c in caps.values()):
        return []
    point_best: list[str] = []
    gs_low: list[str] = []
    points: list[float] = []
    lows: list[float] = []
    for name, c in caps.items():
        ms = c["methods"]
        acc = {m: float(ms[m]["pointing"]["accuracy"] or 0.0) for m in ms}
        gs = {m: float(_gs(report, name, m, "0") or 0.0) for m in ms}
        if max(acc, key=lambda m: acc[m]) == "integrated_gradients":
            point_best.append(name)
            points.append(100 * acc["integrated_gradients"])
        if min(gs, key=lambda m: gs[m]) == "integrated_gradients":
            gs_low.append(name)
            lows.append(gs["integrated_gradients"])

    def span(values: list[float], digits: int) -> str:
        return f"{min(values):.{digits}f}–{max(values):.{digits}f}" if values else "–"

    return [
        f"- Integrated gradients has the best pointing game of the four methods for {len(point_best)} of "
        f"{len(caps)} captioners ({', '.join(point_best) or 'none'}; {span(points, 1)}%) and the lowest "
        f"GroundingScore at δ=0 for {len(gs_low)} of {len(caps)} ({', '.join(gs_low) or 'none'}; "
        f"{span(lows, 2)}). The two measures count different nouns: the pointing game scores only nouns "
        "that name an object of the scene graph (it needs the object's box), while GroundingScore "
        'averages over every noun of the caption, background nouns included ("grass", "lawn", '
        '"water", "floor", "sand": scored against the class under the argmax, the background '
        "wherever no object covers the cell). So the "
        'verdicts above that rest on GroundingScore at δ=0 — "best gradient method", "lowest at '
        'δ=0", M2 against the Transformer — measure grounding of background nouns as much as of '
        "objects; on the objects alone (the pointing game) integrated gradients leads. GroundingScore has no "
        "interval in a run that did not store per-caption scores (see above), so its close differences "
        "between methods are not established there.",
    ]


def claims(report: dict[str, Any]) -> list[str]:
    """The claims of Cornia et al. (2022), each checked on these figures: holds / does not hold, with the
    numbers."""
    caps = report["captioners"]
    out = []
    have = [m for m in GRADIENTS if all(m in c["methods"] for c in caps.values())]
    if len(have) == len(GRADIENTS):
        for name, c in caps.items():
            at0 = {m: _gs(report, name, m, "0") for m in GRADIENTS}
            top = max((v for v in at0.values() if v is not None), default=None)
            leaders = [m for m, v in at0.items() if v is not None and v == top]
            ok = leaders == ["integrated_gradients"]
            expect = "M2 is the paper's exception" if c["architecture"] == "M2" else "paper: IG best"
            best = " = ".join(LABEL[m] for m in leaders) or "none (no nouns)"
            out.append(
                f"- {name} ({c['architecture']}): best gradient method at δ=0 is **{best}** "
                f"({', '.join(f'{LABEL[m]} {_f(v)}' for m, v in at0.items())}) — "
                f"{'holds' if ok else 'does not hold'} ({expect})."
            )
        low = [
            n for n in caps if min(GRADIENTS, key=lambda m: _gs(report, n, m, "0") or 0) == "guided_backprop"
        ]
        gains = {
            n: {m: (_gs(report, n, m, "inf") or 0) - (_gs(report, n, m, "0") or 0) for m in GRADIENTS}
            for n in caps
        }
        most = [n for n in caps if max(gains[n], key=lambda m: gains[n][m]) == "guided_backprop"]
        out.append(
            f"- Guided backprop lowest at δ=0: {len(low)} of {len(caps)} captioners "
            f"({', '.join(low) or 'none'}); "
            f"gains most from δ=0 to ∞: {len(most)} of {len(caps)} ({', '.join(most) or 'none'})."
        )
    arch = {c["architecture"]: n for n, c in caps.items()}
    if "M2" in arch and "Transformer" in arch:
        rows = []
        for m in [m for m in ("attention", *GRADIENTS) if m in caps[arch["M2"]]["methods"]]:
            a, b = _gs(report, arch["M2"], m, "0"), _gs(report, arch["Transformer"], m, "0")
            rows.append(f"{LABEL[m]} {_f(a)} vs {_f(b)}")
        better = sum(
            1
            for m in caps[arch["M2"]]["methods"]
            if (_gs(report, arch["M2"], m, "0") or 0) > (_gs(report, arch["Transformer"], m, "0") or 0)
        )
        out.append(
            f"- Memory-augmented (M2) grounds better than the plain Transformer at δ=0 with {better} of "
            f"{len(caps[arch['M2']]['methods'])} methods ({'; '.join(rows)})."
        )
    return out


def render_markdown(report: dict[str, Any]) -> str:
    caps = report["captioners"]
    methods = list(next(iter(caps.values()))["methods"]) if caps else []
    lines = [
        "# Explanations: grounding on SceneWorld (Cornia et al., 2022, §4–5)",
        "",
        f"{report['images']} held-out SceneWorld images of `{report['data']}` (none used in training), "
        "each captioner's own beam-search caption explained word by word through the served path "
        "(`POST /v1/explain`'s `ExplainService`). Similarity is exact synonym-set identity from the "
        "concept inventory, not GloVe (no word vectors offline); the class under a region is the "
        "scene-graph object covering ≥ 25% of its grid cell (else the background, or the backdrop above "
        "the horizon). Integrated gradients: zero region features as baseline, "
        f"n_steps = {report['n_steps']}. "
        f"Regenerate: `{report.get('command', 'compcap-lab explain-report --repo model_zoo')}`.",
        "",
        "## GroundingScore(δ) (Table 3's shape)",
        "",
        "| captioner | " + " | ".join(f"{LABEL[m]} δ={d}" for m in methods for d in DELTAS) + " |",
        "|---|" + "---:|" * (len(methods) * len(DELTAS)),
    ]
    stored = all("grounding_score_interval" in c["methods"][m] for c in caps.values() for m in methods)
    for name, c in caps.items():
        cells = []
        for m in methods:
            for d in DELTAS:
                found = (c["methods"][m].get("grounding_score_interval") or {}).get(d)
                value = c["methods"][m]["grounding_score"][d]
                cells.append(f"{_f(value)} [{_f(found['low'])}, {_f(found['high'])}]" if found else _f(value))
        lines.append(f"| {name} ({c['architecture']}) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "GroundingScore(δ): per caption, the mean over its nouns of the best similarity within δ steps; "
        "the table averages the captions. "
        + (
            "In brackets its 95% bootstrap interval over captions."
            if stored
            else "This run's JSON holds only the means, not each caption's score, so they have no "
            "interval: a rerun of `compcap-lab explain-report` stores the per-caption scores' interval."
        ),
    ]
    lines += [
        "",
        "## Caption quality, noun alignment and coverage (Table 1's shape)",
        "",
        "| captioner | B-1 | B-4 | R | C | NW | Cov |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in caps.items():
        q = c["quality"]
        lines.append(
            f"| {name} | {100 * q['bleu1']:.1f} | {100 * q['bleu4']:.1f} | {100 * q['rouge_l']:.1f} | "
            f"{100 * q['cider_d']:.1f} | {_f(q['nw'], 3)} | {_pct(q['coverage'])} |"
        )
    lines += [
        "",
        "NW: Needleman–Wunsch alignment of caption nouns with each reference's nouns (match 1, gap −1, "
        "normalised by the longer list), averaged over the references. Cov: Hungarian assignment of caption "
        "nouns to the scene graph's object classes, ÷ number of classes (%). METEOR is left out (Java).",
        "",
        "## Pointing game",
        "",
        "A noun that names an object in the scene hits when its argmax cell's centre lies in one of that "
        "object's boxes; chance = the share of cells whose centre does (exact, per noun).",
        "",
        "| captioner | " + " | ".join(LABEL[m] for m in methods) + " | chance | nouns |",
        "|---|" + "---:|" * (len(methods) + 2),
    ]
    for name, c in caps.items():
        ms = c["methods"]
        acc = []
        for m in methods:
            value = ms[m]["pointing"]["accuracy"]
            found = pointing_interval(ms[m]["pointing"])
            acc.append(
                _f(None if value is None else 100 * value, 1)
                + (f" [{100 * found['low']:.1f}, {100 * found['high']:.1f}]" if found else "")
            )
        chance = ms[methods[0]]["pointing"]["chance"]
        lines.append(
            f"| {name} | " + " | ".join(acc) + f" | {_f(None if chance is None else 100 * chance, 1)} | "
            f"{ms[methods[0]]['pointing']['nouns']} |"
        )
    lines += [
        "",
        "## Cost and completeness",
        "",
        "| captioner | " + " | ".join(f"{LABEL[m]} ms/word" for m in methods),
    ]
    lines[-1] += (
        " | IG rel. δ_conv | IG rel. δ_conv at 20 steps (same images: at n) "
        "| attention observer: caption ms without → with |"
    )
    lines.append("|---|" + "---:|" * (len(methods) + 3))
    for name, c in caps.items():
        ms = c["methods"]
        ig = ms.get("integrated_gradients", {})
        obs = c.get("observer", {})
        at20 = c.get("ig_relative_delta_20")
        same = c.get("ig_relative_delta_same_images")
        lines.append(
            f"| {name} | "
            + " | ".join(f"{ms[m]['ms_per_word']:.1f}" for m in methods)
            + f" | {_e(ig.get('ig_relative_delta'))} | {_e(at20)} ({_e(same)}) | "
            + (
                f"{obs['plain_ms']:.1f} → {obs['observed_ms']:.1f} (×{obs['ratio']:.3f} paired)"
                if obs
                else "–"
            )
            + " |"
        )
    lines += [
        "",
        "ms/word: the median over images of the time to compute one caption's maps ÷ its words, on the "
        "study's 2 torch threads (the gateway uses COMPCAP_EXPLAIN_TORCH_THREADS = 1). Attention's maps are "
        "recorded while the caption decodes: its cost is the observer column (median one-image caption "
        "latency without and with the recorder, each image both ways back to back, and the median of those "
        "paired ratios).",
    ]
    lines[lines.index("## Pointing game") + 2] += (
        " In brackets: the 95% bootstrap interval over nouns (which caption a noun came from is not "
        "stored, so nouns are resampled as independent units)."
    )
    claimed = [*claims(report), *background_caveat(report)]
    lines += ["", "## The claims of Cornia et al. (2022), here", "", *claimed, ""]
    lines += ["![per-word heat maps](explain_examples.png)", ""]
    return "\n".join(lines)


def render_figure(examples: dict[str, dict[str, Any]], path: Path, max_words: int = 8) -> None:
    """One block per captioner: its first image's caption, one row per method, one column per word."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(name, m) for name, ex in examples.items() for m in ex if m != "image"]
    if not rows:
        return
    cols = min(max_words, max(len(examples[n][m]["words"]) for n, m in rows))
    fig, axes = plt.subplots(len(rows), cols + 1, figsize=(1.6 * (cols + 1), 1.7 * len(rows)), squeeze=False)
    for r, (name, method) in enumerate(rows):
        ex = examples[name][method]
        axes[r][0].imshow(examples[name]["image"])
        axes[r][0].set_title(f"{name}\n{LABEL[method]}", fontsize=7)
        for c in range(cols):
            ax = axes[r][c + 1]
            ax.axis("off")
            if c < len(ex["words"]):
                word = ex["words"][c]
                overlay = _overlay(word, examples[name]["image"])
                ax.imshow(overlay if overlay is not None else np.zeros((2, 2)))
                mark = "" if word.get("grounded") is None else (" ✓" if word["grounded"] else " ✗")
                ax.set_title(word["word"] + mark, fontsize=8)
        axes[r][0].axis("off")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=110, format="png")
    plt.close(fig)
    # 5 captioners x 4 methods of heat maps: a 256-colour palette keeps the file well under 2 MiB
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(256, dither=Image.Dither.NONE).save(path, optimize=True)


def _overlay(word: dict[str, Any], image: np.ndarray) -> np.ndarray | None:
    values = np.asarray(word["values"], dtype=np.float32)
    if values.ndim != 2:
        return None
    h, w = image.shape[:2]
    png = overlay_png(image, stretch(upsample(values, h, w)), scale=1)
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(png))))
