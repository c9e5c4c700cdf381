"""The report's PNG plots: Recall@5 per row, the Recall@K curves, and the re-ranking weight's trade-off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def tradeoff_plot(rerank: dict[str, Any] | None, out: Path) -> list[str]:
    """Recall@5 against in-distribution CIDEr-D for each re-ranking weight (development and evaluation
    worlds), with BUTD's beam-5 point and the captioner-alone order."""
    worlds = [(name, rerank[name]) for name in ("dev", "test") if rerank and rerank.get(name)]
    if not worlds:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for (name, sweep), colour in zip(worlds, ("#aa3377", "#4477aa"), strict=False):
        rows = sweep["rows"]
        keys = [k for k in rows if k not in ("baseline", "likelihood")]
        xs = [100 * rows[k]["cider_d_no_comb"] for k in keys]
        ys = [100 * rows[k]["recall_at_5"] for k in keys]
        world = "development world" if name == "dev" else "evaluation world"
        ax.plot(xs, ys, marker="o", color=colour, label=f"BUTR+RR by weight λ ({world})")
        for x, y, k in zip(xs, ys, keys, strict=True):
            ax.annotate(k, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        base = rows["baseline"]
        ax.scatter([100 * base["cider_d_no_comb"]], [100 * base["recall_at_5"]], marker="s", color=colour)
        ax.axvline(90 * base["cider_d_no_comb"], color=colour, linestyle=":", linewidth=1)
        like = rows["likelihood"]
        ax.scatter([100 * like["cider_d_no_comb"]], [100 * like["recall_at_5"]], marker="x", color=colour)
    ax.set_xlabel("CIDEr-D on Test no Comb (■ BUTD beam 5; dotted: 90% of it; × captioner alone)")
    ax.set_ylabel("mean Recall@5 on Test Comb (%)")
    ax.set_title(f"Re-ranking {rerank['beam'] if rerank else ''} beams: recall against fluency", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out / "rerank_weight.png", dpi=120)
    plt.close(fig)
    return ["rerank_weight.png"]


def recall_plots(table: dict[str, Any], out: Path, found: dict[str, Any] | None = None) -> list[str]:
    """``recall_at_5.png`` (mean Recall@5 per row) and ``recall_at_k.png`` (Recall@K curves) in ``out``,
    with 95% error bars from ``found`` (``uncertainty.intervals``) where it has them."""
    labels = list(table)
    by_k = (found or {}).get("recall_at_k", {})

    def bars(label: str, ks: list[str]) -> tuple[list[float], list[list[float]]]:
        values = [100 * float(table[label]["recall_at_k"][k] or 0) for k in ks]
        spans = [by_k.get(label, {}).get(k) or {} for k in ks]
        low = [v - 100 * s["low"] if s else 0.0 for v, s in zip(values, spans, strict=True)]
        high = [100 * s["high"] - v if s else 0.0 for v, s in zip(values, spans, strict=True)]
        return values, [low, high]

    fig, ax = plt.subplots(figsize=(7, 3.5))
    r5 = [bars(k, ["5"]) for k in labels]
    ax.bar(
        labels,
        [v[0] for v, _ in r5],
        yerr=[[e[0][0] for _, e in r5], [e[1][0] for _, e in r5]] if by_k else None,
        capsize=4,
        color="#4477aa",
    )
    ax.set_ylabel("mean Recall@5 (%)")
    title = "Held-out concept pairs (Test Comb), mean over groups"
    ax.set_title(title + (" — 95% intervals over pairs and images" if by_k else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "recall_at_5.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ks = [str(i) for i in range(1, 6)]
    for n, k in enumerate(labels):
        values, err = bars(k, ks)
        shift = (n - (len(labels) - 1) / 2) * 0.04  # keep the error bars of the rows apart
        ax.errorbar(
            [i + shift for i in range(1, 6)],
            values,
            yerr=err if by_k else None,
            marker="o",
            capsize=2,
            label=k,
        )
    ax.set_xlabel("K (captions from the beam)")
    ax.set_ylabel("mean Recall@K (%)")
    if by_k:
        ax.set_title("Recall@K with 95% intervals over pairs and images", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "recall_at_k.png", dpi=120)
    plt.close(fig)
    return ["recall_at_5.png", "recall_at_k.png"]
