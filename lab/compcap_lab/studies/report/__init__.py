"""``compcap-lab report``: evaluate the model zoo on every held-out group of the evaluation world and write
``reports/reproduction.md`` with its JSON and PNG plots, shaped like Nikolaus et al. (2019), Tables 2–3 and
Pantazopoulos et al. (2022), Table 2. Rows: SAT, BUTD, BUTR, BUTR+RR, Transformer, M2, FULL; Recall@5 on the
held-out pairs ("Test Comb"), caption metrics on Test Comb and on Test no Comb (in-distribution), and the
epoch at which each captioner was selected on its validation set with its val BLEU-4.

The work is split by job: ``collect`` (evaluations and records), ``tables`` (averages, targets, Markdown
tables), ``plots`` (PNGs) and ``render`` (the Markdown document); ``write_report`` runs them in order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compcap_lab.studies.report.collect import collect, rerank_entries, rerank_sweep
from compcap_lab.studies.report.markdown import render
from compcap_lab.studies.report.plots import recall_plots, tradeoff_plot
from compcap_lab.studies.report.summary import summarise
from compcap_lab.studies.report.uncertainty import intervals
from compcap_lab.studies.rerank_select import DEFAULT_WEIGHTS, choose_weight, weight_sweep


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
            k: stored[k]
            for k in (
                "rows",
                "raw",
                "selection",
                "rerank",
                "rerank_sweep",
                "rerank_sweep_cases",
                "build",
                "notes",
            )
            if k in stored
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
        collected["build"] = build_summary(zoo)
        if sweep:
            means, cases = rerank_sweep(zoo, data, groups, rerank["weight"])
            collected["rerank_sweep"] = means  # mean Recall@5 per B
            collected["rerank_sweep_cases"] = cases  # per B and group: per_pair with first ranks
    table = summarise(collected, groups)
    found = intervals(collected)
    (out / "reproduction.json").write_text(
        json.dumps({"table": table, "intervals": found, **collected}, indent=2), encoding="utf-8"
    )
    plots = recall_plots(table, out, found) + tradeoff_plot(collected.get("rerank"), out)
    (out / "reproduction.md").write_text(render(table, collected, zoo, data, plots, found), encoding="utf-8")
    return table


def build_summary(zoo: Path) -> dict[str, Any]:
    """What the report's notes take from the zoo's build report (the epoch cap, the patience, the
    encoder's action accuracy), kept in ``reproduction.json`` so that ``--reuse`` renders the same
    notes without the zoo."""
    path = zoo / "build_report.json"
    build = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    action = build.get("training", {}).get("visual_encoder", {}).get("action_accuracy")
    return {
        "max_caption_epochs": build.get("max_caption_epochs"),
        "patience": build.get("patience"),
        "training": {"visual_encoder": {"action_accuracy": action}},
    }


__all__ = ["write_report"]
