"""The report's Markdown: the tables, the notes on model selection, re-ranking and SceneWorld, the plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compcap_lab.studies.report.family import (
    PERMUTATIONS,
    VERDICTS,
    count_text,
    holm_texts,
    holm_values,
    holm_verdict,
    p_phrase,
    p_text,
    verdict,
)
from compcap_lab.studies.report.summary import (
    CATEGORIES,
    pct,
    per_group_lines,
    selected_epochs,
    targets,
    weight_table,
)
from compcap_lab.studies.report.uncertainty import (
    METHOD,
    PAIRED_METHOD,
    cell,
    difference_text,
)


def selection_note(chosen: list[dict[str, Any]], build: dict[str, Any]) -> str:
    """How the captioners were selected, with this zoo's cap, patience and outcome."""
    cap, patience = build.get("max_caption_epochs", "?"), build.get("patience", "?")
    last = sum(1 for c in chosen if c["selected_epoch"] is not None and c["selected_epoch"] == c["epochs"])
    early = sum(1 for c in chosen if c["max_epochs"] and c["epochs"] < c["max_epochs"])
    return f"""Every captioner was trained on its split's training images until its validation BLEU-4
stopped improving (Nikolaus et al., 2019, §4–5: "trained on D_train until it converges, as measured on the
D_val validation split (BLEU)"): after each epoch the split's val images (for a held-out group, the val
half of the images whose references mention one of its pairs; for FULL, a random 10% of the training
world) are captioned greedily and scored by corpus BLEU-4 against their references; the weights of the
best epoch are kept, and training stops after {patience} epochs without improvement or at the cap of {cap}
epochs. The cap is set by the time budget of `make models` (30 min on 2 cores; the zoo trained 4 fixed
epochs before selection was added), not by any evaluation result. The learning rate follows one cycle over
the cap. Outcome: {last} of {len(chosen)} captioners were selected at their last epoch, the others
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
  {ratio}, as in Nikolaus et al., 2019 (33.3 vs 6.5 for BUTD, vs 13.2 for BUTR+RR).
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
- Re-ranked rows decode B = 100 beams and re-rank all of them before taking the top 5 (Nikolaus et al.,
  2019, §5.4); the other rows take the 5 beams of a beam-5 search. With B = K re-ranking only reorders the
  same K captions and cannot change Recall@K. The section on re-ranking above gives the choice of B and λ.
"""


def rerank_lines(collected: dict[str, Any], found: dict[str, Any] | None = None) -> list[str]:
    """How BUTR+RR re-ranks (B and the weight), the weight's selection on the development world, and the
    sensitivity of both targets to B (``sweep_lines``) and to the weight on the evaluation world."""
    rerank = collected.get("rerank")
    if not rerank:
        return []
    weight, beam = float(rerank["weight"]), rerank["beam"]
    lines = [
        "",
        "## BUTR+RR: how the B candidates are re-ranked",
        "",
        f"BUTR+RR decodes B = {beam} beams and returns the top 5 after re-ranking all of them.",
        f"B = {beam} is the setting of the authors' own BUTR+RR evaluation script (`--beam-size 100",
        "--eval-beam-size 5 --re-ranking` in the syncap reproduction of Nikolaus et al., 2019). They",
        "order the candidates by the ranker's cosine alone. Over 100",
        "candidates that order often puts a disfluent caption first (near-ties between paraphrases are",
        "settled by noise), which costs in-distribution CIDEr-D, so the order is cosine + λ × the",
        "captioner's length-normalised log-prob (`rerank_weight` in the API; λ = 0 is the order of",
        "Nikolaus et al.).",
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
            "(`lab/compcap_lab/studies/rerank_select.py`). Development world, mean over groups "
            f"{dev['groups']}:",
            "",
            *weight_table(dev, weight),
        ]
    else:
        lines += ["", f"λ = {weight:g}: no development world was given, so the ranker alone orders."]
    lines += [
        "",
        "History, so that the figures can be weighed: this report used B = 20 and the ranker alone (B was",
        "our guess, fixed before any re-ranked result) until it missed the 2× target (1.18× on the",
        "evaluation world of seed 20261121). We then looked up the authors' B = 100 and, on that same world,",
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
            *weight_table(test, weight),
        ]
    lines += sweep_lines(collected, found or {}, weight, beam)
    return lines


def sweep_lines(collected: dict[str, Any], found: dict[str, Any], weight: float, beam: int) -> list[str]:
    """BUTR+RR's Recall@5 against the number of re-ranked beams B: with the sweep's per-pair first
    ranks (``found["rerank_sweep"]``, ``uncertainty.sweep_tests``) each B with its interval and its
    paired difference against the largest B, Holm-adjusted over the sweep's family; without them the
    means, and why they have neither."""
    sweep = collected.get("rerank_sweep")
    if not sweep:
        return []
    lines = [
        "",
        f"Recall@5 of BUTR+RR against the number of re-ranked beams B (λ = {weight:g}; "
        f"the tables use B = {beam}):",
        "",
        "| B | " + " | ".join(sweep) + " |",
        "|---" * (len(sweep) + 1) + "|",
    ]
    tested = found.get("rerank_sweep")
    if not tested:
        return [
            *lines,
            "| R@5 | " + " | ".join(pct(v) for v in sweep.values()) + " |",
            "",
            f"These have no interval and no paired test against B = {beam}: the sweep's runs stored each",
            "run's mean Recall@5 only (`rerank_sweep` in `reproduction.json`), neither its per-pair counts",
            "nor which image each run hit, and nothing else in the JSON holds them. `compcap-lab report",
            "--rerank-sweep` now stores each run's per-pair first ranks (`rerank_sweep_cases`); its next",
            f"run prints each B with its 95% interval and its paired difference against B = {beam},",
            f"Holm-adjusted over the {len(sweep) - 1}.",
        ]
    reference = tested["reference"]
    holm = holm_texts(tested["paired"])
    row, diff, p_row, h_row = [], [], [], []
    for b, mean in sweep.items():
        row.append(cell(mean, tested["recall_at_5"].get(b)))
        test = tested["paired"].get(f"B = {b} vs B = {reference}")
        diff.append(difference_text(test["difference"]) if test else "—")
        p_row.append(p_text(test["p_value"], test["permutations"]) if test else "—")
        h_row.append(holm[f"B = {b} vs B = {reference}"] if test else "—")
    return [
        *lines,
        "| R@5 [95% interval] | " + " | ".join(row) + " |",
        f"| B − {reference} [95% interval] | " + " | ".join(diff) + " |",
        "| p (sign-flip) | " + " | ".join(p_row) + " |",
        f"| p, Holm over the {len(tested['paired'])} tests | " + " | ".join(h_row) + " |",
        "",
        tested["method"],
    ]


def floor_note(permutations: int = PERMUTATIONS) -> str:
    """What a p-value printed at the permutation floor means."""
    bound = p_text(0.0, permutations)
    return (
        f'A p-value printed "{bound}" is the permutation floor: none of the {count_text(permutations)} '
        f"sign flips reached the observed difference, and the test's smallest value, "
        f"1/{count_text(permutations + 1)}, is set by the number of flips, not by the data; a "
        "Holm-adjusted value that such a p-value decides is a bound too."
    )


def _holm_note(n: int, what: str) -> str:
    return (
        f"The family: the {n} paired tests of {what}. Holm–Bonferroni over it keeps the chance of any false "
        "“higher” or “lower” among them at 5%, whatever their dependence; the verdict after Holm reads the "
        "adjusted p-value by the same rule."
    )


SIGNIFICANCE = {
    "not significant": "short of significance",
    "mixed": "mixed (the permutation test rejects equality for these pairs; the interval over pairs spans 0)",
    "higher": "significant",
    "lower": "significant",
}


def joint_training_lines(table: dict[str, Any], paired: dict[str, Any], holm: dict[str, str]) -> list[str]:
    """What the control rows say about joint training, as the tests have it: BUTR+RR against BUTD+VSE++
    with the interval's bounds (an absence of evidence when it spans 0), and the head-on comparison of
    the two rankers on the same BUTD beams."""
    main, head = "BUTR+RR vs BUTD+VSE++", "BUTD+BUTR head vs BUTD+VSE++"
    if main not in paired:
        return []
    t = paired[main]
    d, v = t["difference"], verdict(t)
    control = table.get("BUTD+VSE++", {}).get("test", {}).get("recall_at_5_mean")
    share = f" ({100 * d['high'] / control:.0f}% of BUTD+VSE++'s {100 * control:.1f})" if control else ""
    said = {
        "not significant": "no difference is detected. That is an absence of evidence, not evidence that "
        f"joint training adds nothing: the interval allows up to {100 * d['high']:+.1f} points in BUTR+RR's "
        f"favour{share}, as it allows {100 * d['low']:+.1f}.",
        "higher": "BUTR+RR is higher.",
        "lower": "BUTD+VSE++ is higher.",
        "mixed": "not settled: " + VERDICTS["mixed"] + ".",
    }[v]
    text = (
        "**Joint training.** BUTR+RR against BUTD+VSE++ (the jointly trained ranker on its own beams against "
        f"a separately trained one on BUTD's): {difference_text(d)} points, {p_phrase(t)} "
        f"(Holm {holm[main]}) — {said}"
    )
    if head in paired:
        h = paired[head]
        favour = "the jointly trained head's" if h["difference"]["estimate"] > 0 else "VSE++'s"
        text += (
            " Head on, both rankers on the same BUTD beams (BUTD+BUTR head vs BUTD+VSE++, the test of the "
            f"ranker alone): {difference_text(h['difference'])} points, {p_phrase(h)} (Holm {holm[head]}), "
            f"in {favour} favour, {SIGNIFICANCE[verdict(h)]}."
        )
    return ["", text]


def control_lines(table: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """The control rows' section: what each separates, and the paired tests (``uncertainty.PAIRED``) —
    differences of mean Recall@5 ×100 with their intervals, raw and Holm-adjusted p-values — with what
    they support, at the raw and at the adjusted p-value, and what they say about joint training."""
    paired = found.get("paired") or {}
    if "BUTD+VSE++" not in table or not paired:
        return []
    holm = holm_texts(paired)
    adjusted = holm_values(paired)
    lines = [
        "",
        "## Re-ranking or joint training? The control rows",
        "",
        "Nikolaus et al. (2019) credit BUTR+RR's recall of held-out pairs to the ranking head trained",
        "*jointly* with the captioner. Two control rows re-rank BUTD's beams exactly as BUTR+RR re-ranks",
        "its own (B = 100, the same λ): **BUTD+VSE++** by the VSE++ of the same group, trained separately",
        "on the same split, and **BUTD+BUTR head** by the ranking head of the group's BUTR (joint training's",
        "ranker on beams that joint training did not shape). " + PAIRED_METHOD,
        "",
        "| comparison (a vs b) | difference a − b in R@5 ×100 [95% interval] | p-value | p-value, Holm "
        "| at 5%: raw p / Holm p |",
        "|---|---|---|---|---|",
    ]
    for name, test in paired.items():
        after = holm_verdict(test, adjusted[name])
        raw = p_text(test["p_value"], test["permutations"])
        diff = difference_text(test["difference"])
        lines.append(f"| {name} | {diff} | {raw} | {holm[name]} | {verdict(test)} / {after} |")
    permutations = max(int(t["permutations"]) for t in paired.values())
    lines += [
        "",
        _holm_note(len(paired), "this table") + " The B sweep's tests, when the sweep stores "
        "its cases, are a family of their own; the targets are judged on their intervals and are in "
        "neither. " + floor_note(permutations),
    ]
    verdicts = [f"{name}: {VERDICTS[verdict(test)]} ({p_phrase(test)})" for name, test in paired.items()]
    lines += ["", "At the 5% level: " + "; ".join(verdicts) + "."]
    lines += joint_training_lines(table, paired, holm)
    return lines


def render(
    table: dict[str, Any],
    collected: dict[str, Any],
    zoo: Path,
    data: Path,
    plots: list[str],
    found: dict[str, Any] | None = None,
) -> str:
    """``reproduction.md``: every section of the report, from the summarised ``table`` and ``collected``,
    each Recall@K with its interval from ``found`` (``uncertainty.intervals``)."""
    build = (
        json.loads((zoo / "build_report.json").read_text(encoding="utf-8"))
        if (zoo / "build_report.json").is_file()
        else collected.get("build") or {}
    )
    found = found or {}

    def iv(part: str, label: str, key: str) -> dict[str, Any] | None:
        return dict(found.get(part, {}).get(label, {}).get(key) or {}) or None

    lines = [
        "# Reproduction report: compositional generalisation on SceneWorld",
        "",
        f"Model zoo `{zoo}`, evaluated on `{data}` (a world whose seed was never used for training or "
        "development). Generated by `compcap-lab report`; raw per-group JSON beside it.",
        "",
        "Every Recall@K is given with its 95% interval in brackets: " + METHOD + " The offline "
        "evaluation computes no false-composition rate (the live systematicity probe does).",
        "",
        "## Nikolaus et al. (2019) Table 2 / Pantazopoulos et al. (2022) Table 2 shape (values ×100; "
        "CIDEr-D ×100)",
        "",
        "| model | groups | selected epoch | R@5 (TC) | BLEU-4 TC | METEOR TC | ROUGE-L TC | CIDEr-D TC "
        "| BLEU-4 TNC | CIDEr-D TNC |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    epochs = selected_epochs(collected)
    for label, s in table.items():
        tc, tnc = s["test"], s["test_no_comb"]
        lines.append(
            f"| {label} | {','.join(map(str, s['groups']))} | {epochs.get(label, '—')} | "
            f"{cell(tc['recall_at_5_mean'], iv('recall_at_k', label, '5'))} | {pct(tc['bleu4'])} | "
            f"{pct(tc['meteor'])} | {pct(tc['rouge_l'])} | {pct(tc['cider_d'])} | {pct(tnc['bleu4'])} | "
            f"{pct(tnc['cider_d'])} |"
        )
    lines += [
        "",
        "## Nikolaus et al. (2019) Table 3 shape: Recall@5 by category of held-out pair",
        "",
        "| model | " + " | ".join(CATEGORIES) + " |",
        "|---" * (len(CATEGORIES) + 1) + "|",
    ]
    for label, s in table.items():
        lines.append(
            f"| {label} | "
            + " | ".join(
                cell(s["per_category"][c], iv("recall_at_5_by_category", label, c)) for c in CATEGORIES
            )
            + " |"
        )
    lines += [
        "",
        "## Recall@K",
        "",
        "| model | " + " | ".join(f"R@{k}" for k in "12345") + " |",
        "|---" * 6 + "|",
    ]
    for label, s in table.items():
        lines.append(
            f"| {label} | "
            + " | ".join(cell(s["recall_at_k"][k], iv("recall_at_k", label, k)) for k in "12345")
            + " |"
        )
    lines += per_group_lines(collected, found)
    lines += control_lines(table, found)
    notes = collected.get("notes") or []
    if notes:
        lines += ["", *(f"Note: {n}" for n in notes)]
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
                f"{pct(c['selected_val_bleu4'])} | {curve} |"
            )
    lines += [
        "",
        "## Targets",
        "",
        "A ratio target is met when its interval's lower bound reaches it; the point estimate alone is in",
        "the last column. CIDEr-D is a corpus figure and the per-image scores are not stored: that target",
        "has no interval.",
        "",
        "| target | measured [95% interval] | met (lower bound) | met (point estimate) |",
        "|---|---|---|---|",
    ]
    for what, measured, met, point in targets(table, found.get("ratios")):
        bound = "—" if met is None else ("yes" if met else "no")
        lines.append(f"| {what} | {measured} | {bound} | {'yes' if point else 'no'} |")
    lines += rerank_lines(collected, found)
    lines += ["", world_note(table, build), ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)
