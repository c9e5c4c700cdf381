"""``compcap report``: evaluate the model zoo on every held-out group of the evaluation world and write
``reports/reproduction.md`` with its JSON and PNG plots, shaped like seed 000 Tables 2–3 and seed 001
Table 2. Rows: SAT, BUTD, BUTR, BUTR+RR, Transformer, M2, FULL; Recall@5 on the held-out pairs ("Test
Comb"), caption metrics on Test Comb and on Test no Comb (in-distribution), and the epoch at which each
captioner was selected on its validation set with its val BLEU-4."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from export.evaluate import evaluate
from export.rerank_select import DEFAULT_WEIGHTS, Entry, choose_weight, weight_sweep
from service.manifest import Manifest, load_manifest

METRICS = ("recall_at_5_mean", "bleu4", "meteor", "rouge_l", "cider_d")
CATEGORIES = (
    "colour_animate",
    "colour_inanimate",
    "size_animate",
    "size_inanimate",
    "verb_transitive",
    "verb_intransitive",
)
SETS = {"test": "Test Comb (held-out pairs)", "test_no_comb": "Test no Comb (in-distribution)"}


def _rows(manifest: Manifest, groups: Sequence[int]) -> dict[str, list[tuple[int, str, str | None]]]:
    """Table row → [(group, captioner, ranker)] whose results are averaged into it."""
    names = {c.name for c in manifest.captioners}
    rows: dict[str, list[tuple[int, str, str | None]]] = {}
    for label, arch, rerank in (
        ("SAT", "sat", False),
        ("BUTD", "butd", False),
        ("BUTR", "butr", False),
        ("BUTR+RR", "butr", True),
        ("Transformer", "transformer", False),
        ("M2", "m2", False),
    ):
        rows[label] = [
            (g, f"{arch}_g{g}", f"{arch}_g{g}" if rerank else None) for g in groups if f"{arch}_g{g}" in names
        ]
    rows["FULL"] = [(g, "butd_full", None) for g in groups] if "butd_full" in names else []
    return {k: v for k, v in rows.items() if v}


def _find(results: list[dict[str, Any]], captioner: str, ranker: str | None) -> dict[str, Any]:
    for row in results:
        if row["captioner"] == captioner and row["ranker"] == ranker:
            return row
    raise KeyError(f"no result for {captioner}+{ranker}")


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def collect(
    zoo: Path, data: Path, groups: Sequence[int], out: Path, rerank_weight: float = 0.0
) -> dict[str, Any]:
    """Evaluate each group's captioners (and FULL) on both sets; write and return the raw results.
    BUTR+RR re-ranks 100 beams with ``rerank_weight``."""
    manifest = load_manifest(zoo)
    rows = _rows(manifest, groups)
    raw: dict[str, Any] = {}
    for g in groups:
        caps = sorted({cap for entries in rows.values() for grp, cap, _ in entries if grp == g})
        for set_name in SETS:
            key = f"group{g}/{set_name}"
            raw[key] = evaluate(
                zoo,
                data,
                None,
                "systematicity",
                g,
                out / f"systematicity_{g}_{set_name}.json",
                set_name=set_name,
                captioners=caps,
                fallback_ranker=False,
                rerank_weight=rerank_weight,
            )
    listed = {k: [list(e) for e in v] for k, v in rows.items()}
    return {"rows": listed, "raw": raw, "selection": selection(manifest, listed)}


def selection(manifest: Manifest, rows: dict[str, list[list[Any]]]) -> list[dict[str, Any]]:
    """Per captioner of the zoo: its table row, training split, epochs run / cap, the epoch validation
    selected and the val BLEU-4 curve (from the manifest's training records)."""
    label = {entry[1]: row for row, entries in rows.items() for entry in entries if entry[2] is None}
    out = []
    for cap in manifest.captioners:
        t = cap.training
        curve = list(t.val_bleu4)
        out.append(
            {
                "captioner": cap.name,
                "row": label.get(cap.name, cap.architecture),
                "trained_on": t.split,
                "images": t.images,
                "epochs": t.epochs,
                "max_epochs": t.max_epochs,
                "selected_epoch": t.selected_epoch,
                "val_images": t.val_images,
                "val_bleu4": curve,
                "selected_val_bleu4": curve[t.selected_epoch - 1] if t.selected_epoch and curve else None,
            }
        )
    return out


def rerank_sweep(
    zoo: Path,
    data: Path,
    groups: Sequence[int],
    rerank_weight: float,
    candidates: Sequence[int] = (5, 10, 20, 40, 100),
) -> dict[str, float | None]:
    """Mean Recall@5 of BUTR+RR on Test Comb when the ranker re-ranks B beams (B in ``candidates``)."""
    out: dict[str, float | None] = {}
    for b in candidates:
        values = []
        for g in groups:
            result = evaluate(
                zoo,
                data,
                None,
                "systematicity",
                g,
                None,
                captioners=[f"butr_g{g}"],
                fallback_ranker=False,
                meteor=False,
                rerank_beam_size=b,
                rerank_weight=rerank_weight,
            )
            values.append(_find(result["results"], f"butr_g{g}", f"butr_g{g}")["recall_at_5_mean"])
        out[str(b)] = _mean(values)
    return out


def rerank_entries(zoo: Path, groups: Sequence[int]) -> list[Entry]:
    """BUTR+RR of each group with its BUTD baseline, for the groups the zoo has both of."""
    names = {c.name for c in load_manifest(zoo).captioners}
    return [
        Entry(g, f"butr_g{g}", f"butr_g{g}", f"butd_g{g}")
        for g in groups
        if {f"butr_g{g}", f"butd_g{g}"} <= names
    ]


def summarise(collected: dict[str, Any], groups: Sequence[int]) -> dict[str, Any]:
    """Average each table row over its groups: metrics per set, Recall@K curve, per-category Recall@5."""
    table: dict[str, Any] = {}
    for label, entries in collected["rows"].items():
        summary: dict[str, Any] = {"groups": sorted({g for g, _, _ in entries})}
        for set_name in SETS:
            found = [_find(collected["raw"][f"group{g}/{set_name}"]["results"], c, r) for g, c, r in entries]
            summary[set_name] = {m: _mean([f[m] for f in found]) for m in METRICS}
            if set_name == "test":
                summary["recall_at_k"] = {k: _mean([f["recall_at_k"][k] for f in found]) for k in "12345"}
                summary["per_category"] = {
                    c: _mean(
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


def targets(table: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """The issue's targets as (what, measured, met): seed 000's ratios of mean Recall@5 and the
    in-distribution (Test no Comb) CIDEr-D of BUTR+RR against BUTD."""

    def get(row: str, set_name: str, metric: str) -> float | None:
        value = table.get(row, {}).get(set_name, {}).get(metric)
        return None if value is None else float(value)

    out: list[tuple[str, str, bool | None]] = []
    rr, butd, full = (get(r, "test", "recall_at_5_mean") for r in ("BUTR+RR", "BUTD", "FULL"))
    if rr is not None and butd:
        out.append(
            (
                "BUTR+RR mean Recall@5 ≥ 2× BUTD's (seed 000: 13.2 vs 6.5)",
                f"{100 * rr:.1f} vs {100 * butd:.1f} = {rr / butd:.2f}×",
                rr >= 2 * butd,
            )
        )
    if full is not None and rr:
        out.append(
            (
                "FULL ≥ 1.5× BUTR+RR (seed 000: 33.3 vs 13.2)",
                f"{100 * full:.1f} vs {100 * rr:.1f} = {full / rr:.2f}×",
                full >= 1.5 * rr,
            )
        )
    c_rr, c_butd = get("BUTR+RR", "test_no_comb", "cider_d"), get("BUTD", "test_no_comb", "cider_d")
    if c_rr is not None and c_butd:
        gap = (c_rr - c_butd) / c_butd
        out.append(
            (
                "BUTR+RR in-distribution CIDEr-D within 10% of BUTD's",
                f"{100 * c_rr:.1f} vs {100 * c_butd:.1f} ({100 * gap:+.1f}%)",
                abs(gap) <= 0.10,
            )
        )
    return out


def selection_note(chosen: list[dict[str, Any]], build: dict[str, Any]) -> str:
    """How the captioners were selected, with this zoo's cap, patience and outcome."""
    cap, patience = build.get("max_caption_epochs", "?"), build.get("patience", "?")
    last = sum(1 for c in chosen if c["selected_epoch"] is not None and c["selected_epoch"] == c["epochs"])
    early = sum(1 for c in chosen if c["max_epochs"] and c["epochs"] < c["max_epochs"])
    return f"""Every captioner was trained on its split's training images until its validation BLEU-4
stopped improving (seed 000 §4–5: "trained on D_train until it converges, as measured on the D_val
validation split (BLEU)"): after each epoch the split's val images (for a held-out group, the val half
of the images whose references mention one of its pairs; for FULL, a random 10% of the training world)
are captioned greedily and scored by corpus BLEU-4 against their references; the weights of the best
epoch are kept, and training stops after {patience} epochs without improvement or at the cap of {cap}
epochs. The cap is set by the time budget of `make models` (30 min on 2 cores; the zoo trained 4 fixed
epochs before selection was added), not by any evaluation result. The learning rate follows one cycle
over the cap. Outcome: {last} of {len(chosen)} captioners were selected at their last epoch, the others
earlier; {early} stopped before the cap. FULL now trains on the train set of the training world's "full"
split (80%; before, it trained on every training-world image) so that it has a val set of its own."""


def world_note(table: dict[str, Any], build: dict[str, Any]) -> str:
    """Notes on SceneWorld as a benchmark, with this zoo's figures."""

    def r5(row: str) -> float | None:
        value = table.get(row, {}).get("test", {}).get("recall_at_5_mean")
        return None if value is None else float(value)

    full, butd, rr = r5("FULL"), r5("BUTD"), r5("BUTR+RR")
    ratio = (
        f"{full / butd:.1f}× BUTD's and {full / rr:.1f}× BUTR+RR's mean Recall@5"
        if full is not None and butd and rr
        else "a multiple of the held-out models' recall"
    )
    action = build.get("training", {}).get("visual_encoder", {}).get("action_accuracy")
    action_text = f"{100 * action:.0f}%" if action is not None else "low"
    return f"""## About SceneWorld as a benchmark

- Held-out pairs are neither trivial nor impossible here: FULL, which saw every pair, reaches
  {ratio}, as in seed 000 (33.3 vs 6.5 for BUTD, vs 13.2 for BUTR+RR).
- One world change was made for this benchmark, after a first evaluation run (of models trained on
  everything) showed it: filler prefixes ("a photo of …", "a view of …") were in a third of the
  captions, so the five beams of a model differed only in the prefix and Recall@K barely grew with K.
  They are now in about 8% of captions (COCO has them, rarely). No held-out model was trained before
  the change, and nothing was tuned against the targets. Omission (a present pair named in about
  1.5 of 5 captions, as COCO's 1.57), size relative to the class, and distractor colours are unchanged.
- Verb pairs stay close to 0 for every held-out model and low even for FULL: actions are small poses
  on 96 × 96 images (the encoder's per-cell action accuracy is {action_text}), so SceneWorld's verbs
  are a harder test than its adjectives. That is a property of the rendering, noted rather than tuned
  away.
- Re-ranked rows decode B = 100 beams and re-rank all of them before taking the top 5 (seed 000 §5.4);
  the other rows take the 5 beams of a beam-5 search. With B = K re-ranking only reorders the same K
  captions and cannot change Recall@K. The section on re-ranking above gives the choice of B and λ.
"""


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _tradeoff_plot(rerank: dict[str, Any] | None, out: Path) -> list[str]:
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


def _plots(table: dict[str, Any], out: Path) -> list[str]:
    labels = list(table)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(labels, [100 * (table[k]["test"]["recall_at_5_mean"] or 0) for k in labels], color="#4477aa")
    ax.set_ylabel("mean Recall@5 (%)")
    ax.set_title("Held-out concept pairs (Test Comb), mean over groups")
    fig.tight_layout()
    fig.savefig(out / "recall_at_5.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k in labels:
        ax.plot(
            range(1, 6),
            [100 * (table[k]["recall_at_k"][str(i)] or 0) for i in range(1, 6)],
            marker="o",
            label=k,
        )
    ax.set_xlabel("K (captions from the beam)")
    ax.set_ylabel("mean Recall@K (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "recall_at_k.png", dpi=120)
    plt.close(fig)
    return ["recall_at_5.png", "recall_at_k.png"]


def _per_group_lines(collected: dict[str, Any]) -> list[str]:
    """Mean Recall@5 of each multi-group row per held-out group, and BUTR+RR / BUTD per group."""
    per: dict[str, dict[int, float | None]] = {}
    for label, entries in collected["rows"].items():
        if len({g for g, _, _ in entries}) < 2:
            continue
        per[label] = {
            g: _find(collected["raw"][f"group{g}/test"]["results"], c, r)["recall_at_5_mean"]
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
        lines.append(f"| {label} | " + " | ".join(_pct(values.get(g)) for g in groups) + " |")
    rr, butd = per.get("BUTR+RR"), per.get("BUTD")
    if rr and butd:
        ratios = []
        for g in groups:
            a, b = rr.get(g), butd.get(g)
            ratios.append(f"{a / b:.2f}×" if a is not None and b else "—")
        lines.append("| BUTR+RR / BUTD | " + " | ".join(ratios) + " |")
    counts = []
    for label, entries in collected["rows"].items():
        if label not in per:
            continue
        hits = cases = 0
        for g, c, r in entries:
            pairs = _find(collected["raw"][f"group{g}/test"]["results"], c, r)["per_pair"] or {}
            hits += sum(int(p["hits"]["5"]) for p in pairs.values())
            cases += sum(int(p["images"]) for p in pairs.values())
        counts.append(f"{label} {hits}")
    if counts:
        lines += [
            "",
            f"These means rest on few events: hits at K = 5 over all (held-out pair, image) cases — "
            f"{', '.join(counts)} (of {cases} cases per row) — and on one training run per model.",
        ]
    return lines


def _selected_epochs(collected: dict[str, Any]) -> dict[str, str]:
    """Table row → the selected epoch of each of its captioners (in group order), e.g. "5,4,5,5"."""
    by_name = {c["captioner"]: c for c in collected.get("selection") or []}
    out: dict[str, str] = {}
    for label, entries in collected["rows"].items():
        names = dict.fromkeys(captioner for _, captioner, _ in entries)  # FULL repeats one captioner
        picked = [by_name[n]["selected_epoch"] for n in names if n in by_name]
        if picked and all(e is not None for e in picked):
            out[label] = ",".join(str(e) for e in picked)
    return out


def _weight_table(sweep: dict[str, Any], chosen: float) -> list[str]:
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
            label = "ranker alone (seed 000)" + (" **(chosen)**" if chosen == 0.0 else "")
        gap = (v["cider_d_no_comb"] - base) / base
        lines.append(
            f"| {label} | {_pct(v['recall_at_5'])} | {_pct(v['cider_d_no_comb'])} | {100 * gap:+.1f}% |"
        )
    return lines


def rerank_lines(collected: dict[str, Any]) -> list[str]:
    """How BUTR+RR re-ranks (B and the weight), the weight's selection on the development world, and the
    sensitivity of both targets to B and to the weight on the evaluation world."""
    rerank = collected.get("rerank")
    if not rerank:
        return []
    weight, beam = float(rerank["weight"]), rerank["beam"]
    lines = [
        "",
        "## BUTR+RR: how the B candidates are re-ranked",
        "",
        f"BUTR+RR decodes B = {beam} beams and returns the top 5 after re-ranking all of them.",
        f"B = {beam} is the setting of the seeds' own BUTR+RR evaluation script (`--beam-size 100",
        "--eval-beam-size 5 --re-ranking` in the syncap reproduction of seed 000). Seed 000 orders the",
        "candidates by the ranker's cosine alone. Over 100",
        "candidates that order often puts a disfluent caption first (near-ties between paraphrases are",
        "settled by noise), which costs in-distribution CIDEr-D, so the order is cosine + λ × the",
        "captioner's length-normalised log-prob (`rerank_weight` in the API; λ = 0 is seed 000's order).",
    ]
    dev = rerank.get("dev")
    if dev:
        lines += [
            "",
            f"λ = {weight:g} was chosen on a development world before this evaluation: the training world's",
            "held-out halves (Test Comb and Test no Comb images of each group's split of the *training*",
            "world, which no captioner trained on or was selected on; the shared visual encoder did see",
            "their pixels and scene labels, never their captions), by a rule fixed before the development",
            "run: the",
            "highest Recall@5 among the weights whose in-distribution CIDEr-D stays within 10% of BUTD's",
            f"(`export/rerank_select.py`). Development world, mean over groups {dev['groups']}:",
            "",
            *_weight_table(dev, weight),
        ]
    else:
        lines += ["", f"λ = {weight:g}: no development world was given, so the ranker alone orders."]
    lines += [
        "",
        "History, so that the figures can be weighed: this report used B = 20 and the ranker alone (B was",
        "our guess, fixed before any re-ranked result) until it missed the 2× target (1.18× on the",
        "evaluation world of seed 20261121). We then looked up the seeds' B = 100 and, on that same world,",
        "saw 2.44× with in-distribution CIDEr-D 12.5% below BUTD's, and looked at the weight grid there.",
        "That world was therefore retired: the weight was then chosen on the development world by the",
        "rule above, and every figure in this report comes from a new evaluation world (seed 20270313).",
    ]
    test = rerank.get("test")
    if test:
        lines += [
            "",
            "Sensitivity on the evaluation world (the same weights; the tables above use the chosen one):",
            "",
            *_weight_table(test, weight),
        ]
    sweep = collected.get("rerank_sweep")
    if sweep:
        lines += [
            "",
            f"Recall@5 of BUTR+RR against the number of re-ranked beams B (λ = {weight:g}; "
            f"the tables use B = {beam}):",
            "",
            "| B | " + " | ".join(sweep) + " |",
            "|---" * (len(sweep) + 1) + "|",
            "| R@5 | " + " | ".join(_pct(v) for v in sweep.values()) + " |",
        ]
    return lines


def render(table: dict[str, Any], collected: dict[str, Any], zoo: Path, data: Path, plots: list[str]) -> str:
    build = (
        json.loads((zoo / "build_report.json").read_text(encoding="utf-8"))
        if (zoo / "build_report.json").is_file()
        else {}
    )
    lines = [
        "# Reproduction report: compositional generalisation on SceneWorld",
        "",
        f"Model zoo `{zoo}`, evaluated on `{data}` (a world whose seed was never used for training or "
        "development). Generated by `compcap report`; raw per-group JSON beside it.",
        "",
        "## Seed 000 Table 2 / seed 001 Table 2 shape (values ×100; CIDEr-D ×100)",
        "",
        "| model | groups | selected epoch | R@5 (TC) | BLEU-4 TC | METEOR TC | ROUGE-L TC | CIDEr-D TC "
        "| BLEU-4 TNC | CIDEr-D TNC |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    epochs = _selected_epochs(collected)
    for label, s in table.items():
        tc, tnc = s["test"], s["test_no_comb"]
        lines.append(
            f"| {label} | {','.join(map(str, s['groups']))} | {epochs.get(label, '—')} | "
            f"{_pct(tc['recall_at_5_mean'])} | {_pct(tc['bleu4'])} | "
            f"{_pct(tc['meteor'])} | {_pct(tc['rouge_l'])} | {_pct(tc['cider_d'])} | {_pct(tnc['bleu4'])} | "
            f"{_pct(tnc['cider_d'])} |"
        )
    lines += [
        "",
        "## Seed 000 Table 3 shape: Recall@5 by category of held-out pair",
        "",
        "| model | " + " | ".join(CATEGORIES) + " |",
        "|---" * (len(CATEGORIES) + 1) + "|",
    ]
    for label, s in table.items():
        lines.append(f"| {label} | " + " | ".join(_pct(s["per_category"][c]) for c in CATEGORIES) + " |")
    lines += [
        "",
        "## Recall@K",
        "",
        "| model | " + " | ".join(f"R@{k}" for k in "12345") + " |",
        "|---" * 6 + "|",
    ]
    for label, s in table.items():
        lines.append(f"| {label} | " + " | ".join(_pct(s["recall_at_k"][k]) for k in "12345") + " |")
    lines += _per_group_lines(collected)
    chosen = collected.get("selection") or []
    if chosen:
        lines += [
            "",
            "## Model selection on the validation split (greedy val BLEU-4 ×100 after each epoch)",
            "",
            selection_note(chosen, build),
            "",
            "| captioner | row | trained on | train images | val images | epochs run / cap | selected epoch "
            "| val BLEU-4 at selected | val BLEU-4 per epoch |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in chosen:
            curve = ", ".join(f"{100 * b:.1f}" for b in c["val_bleu4"]) or "—"
            lines.append(
                f"| {c['captioner']} | {c['row']} | {c['trained_on']} | {c['images']} | {c['val_images']} | "
                f"{c['epochs']} / {c['max_epochs'] or '—'} | {c['selected_epoch'] or '—'} | "
                f"{_pct(c['selected_val_bleu4'])} | {curve} |"
            )
    lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for what, measured, met in targets(table):
        lines.append(f"| {what} | {measured} | {'yes' if met else 'no'} |")
    lines += rerank_lines(collected)
    lines += ["", world_note(table, build), ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def write_report(
    zoo: Path,
    data: Path,
    out: Path,
    groups: Sequence[int] = (1, 2, 3, 4),
    reuse: bool = False,
    sweep: bool = False,
    dev_data: Path | None = None,
) -> dict[str, Any]:
    """Evaluate (or, with ``reuse``, read back ``reproduction.json``) and write the report.

    With ``dev_data`` (the training world, whose held-out halves no captioner trained or was selected on)
    BUTR+RR's ``rerank_weight`` is chosen there first (``choose_weight``); without it the weight is 0 (the
    ranker alone). ``sweep`` adds the sensitivity runs on the evaluation world: Recall@5 against the
    number of re-ranked beams B, and both targets' figures against the weight."""
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "reproduction.json"
    stored = json.loads(saved.read_text(encoding="utf-8")) if reuse and saved.is_file() else None
    if stored:
        collected = {
            k: stored[k] for k in ("rows", "raw", "selection", "rerank", "rerank_sweep") if k in stored
        }
    else:
        rerank: dict[str, Any] = {"beam": 100, "weight": 0.0, "weights": list(DEFAULT_WEIGHTS)}
        entries = rerank_entries(zoo, groups)
        if dev_data is not None and entries:
            rerank["dev_data"] = str(dev_data)
            rerank["dev"] = weight_sweep(zoo, dev_data, entries, DEFAULT_WEIGHTS)
            rerank["weight"] = choose_weight(rerank["dev"])
        if sweep and entries:
            rerank["test"] = weight_sweep(zoo, data, entries, DEFAULT_WEIGHTS)
        collected = collect(zoo, data, groups, out, rerank_weight=rerank["weight"])
        collected["rerank"] = rerank
        if sweep:
            collected["rerank_sweep"] = rerank_sweep(zoo, data, groups, rerank["weight"])
    table = summarise(collected, groups)
    (out / "reproduction.json").write_text(
        json.dumps({"table": table, **collected}, indent=2), encoding="utf-8"
    )
    plots = _plots(table, out) + _tradeoff_plot(collected.get("rerank"), out)
    (out / "reproduction.md").write_text(render(table, collected, zoo, data, plots), encoding="utf-8")
    return table
