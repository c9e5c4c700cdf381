"""The report's data: which captioners each table row averages, their evaluations on both sets of every
held-out group (``compcap_lab.studies.evaluate``), the model-selection records, and BUTR+RR's runs against
the number of re-ranked beams."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compcap_lab.studies.evaluate import evaluate
from compcap_lab.studies.rerank_select import Entry
from export.models.architectures import ARCHITECTURES
from service.manifest import Manifest, load_manifest

SETS = {"test": "Test Comb (held-out pairs)", "test_no_comb": "Test no Comb (in-distribution)"}


def row_specs() -> list[tuple[str, str, bool]]:
    """(table row, architecture, re-ranked) in the table's order: per architecture of ``ARCHITECTURES`` its
    display name, then "<display>+RR" (re-ranked by its own ranking head) when it ranks."""
    specs = []
    for arch in ARCHITECTURES.values():
        specs.append((arch.display, arch.name, False))
        if arch.ranks:
            specs.append((f"{arch.display}+RR", arch.name, True))
    return specs


# The control rows: BUTD's beams re-ranked the same way (B = 100, the same weight) by a ranker
# not trained jointly with it — the separately trained VSE++ of its group, and BUTR's ranking head of its
# group — so that "re-ranking 100 beams" and "training the ranker jointly with the captioner" separate.
# (row, captioner architecture, ranker prefix), placed after the row named in CONTROLS_AFTER.
CONTROLS = (("BUTD+VSE++", "butd", "vsepp"), ("BUTD+BUTR head", "butd", "butr"))
CONTROLS_AFTER = "BUTR+RR"


def rows_for(manifest: Manifest, groups: Sequence[int]) -> dict[str, list[tuple[int, str, str | None]]]:
    """Table row → [(group, captioner, ranker)] whose results are averaged into it: the architectures'
    rows, the control rows (``CONTROLS``) after BUTR+RR, and last "FULL": the zoo's captioner trained
    with nothing held out, evaluated on every group's sets. A row lists the groups the zoo has its
    models for."""
    names = {c.name for c in manifest.captioners}
    rankers = {r.name for r in manifest.rankers}
    rows: dict[str, list[tuple[int, str, str | None]]] = {}
    for label, arch, rerank in row_specs():
        rows[label] = [
            (g, f"{arch}_g{g}", f"{arch}_g{g}" if rerank else None) for g in groups if f"{arch}_g{g}" in names
        ]
        if label == CONTROLS_AFTER:
            for control, cap, ranker in CONTROLS:
                rows[control] = [
                    (g, f"{cap}_g{g}", f"{ranker}_g{g}")
                    for g in groups
                    if f"{cap}_g{g}" in names and f"{ranker}_g{g}" in rankers
                ]
    full = [f"{a.name}_full" for a in ARCHITECTURES.values() if a.zoo_full and f"{a.name}_full" in names]
    rows["FULL"] = [(g, full[0], None) for g in groups] if full else []
    return {k: v for k, v in rows.items() if v}


def find_result(results: list[dict[str, Any]], captioner: str, ranker: str | None) -> dict[str, Any]:
    """The result row of ``captioner`` re-ranked by ``ranker`` (None: not re-ranked)."""
    for row in results:
        if row["captioner"] == captioner and row["ranker"] == ranker:
            return row
    raise KeyError(f"no result for {captioner}+{ranker}")


def mean_of(values: list[float | None]) -> float | None:
    """The mean of the values that are not None; None when there are none."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def collect(
    zoo: Path,
    data: Path,
    groups: Sequence[int],
    out: Path,
    rerank_weight: float = 0.0,
    rows: Mapping[str, Sequence[tuple[int, str, str | None]]] | None = None,
    split_file: Callable[[int, str], Path | None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Evaluate each group's runs (every row's captioner and ranker, FULL too) on both sets; write and
    return the raw results. Every re-ranked run (BUTR+RR and the controls) re-ranks 100 beams with
    ``rerank_weight``. Another study's rows: ``rows`` (table row → [(group, captioner, ranker)], instead
    of the zoo's ``rows_for``); ``split_file(group, set)``: the split file a set is evaluated on (None:
    the data's own); ``options``: ``evaluate``'s keyword options (``pairs_fn``, ``meteor``)."""
    manifest = load_manifest(zoo)
    rows = {k: list(v) for k, v in rows.items()} if rows is not None else rows_for(manifest, groups)
    raw: dict[str, Any] = {}
    for g in groups:
        of_group = ((cap, rk) for entries in rows.values() for grp, cap, rk in entries if grp == g)
        runs = list(dict.fromkeys(of_group))
        for set_name in SETS:
            key = f"group{g}/{set_name}"
            raw[key] = evaluate(
                zoo,
                data,
                split_file(g, set_name) if split_file else None,
                "systematicity",
                g,
                out / f"systematicity_{g}_{set_name}.json",
                set_name=set_name,
                runs=runs,
                rerank_weight=rerank_weight,
                **options,
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
) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
    """BUTR+RR on Test Comb when the ranker re-ranks B beams (B in ``candidates``): its mean Recall@5
    per B, and per B and group the run's ``per_pair`` (images, hits, category and each image's first
    rank: B → "group<g>" → pair label → ...) so that each B gets an interval and a paired test against
    the largest B (``uncertainty.sweep_tests``)."""
    means: dict[str, float | None] = {}
    cases: dict[str, dict[str, Any]] = {}
    for b in candidates:
        values = []
        cases[str(b)] = {}
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
            found = find_result(result["results"], f"butr_g{g}", f"butr_g{g}")
            values.append(found["recall_at_5_mean"])
            cases[str(b)][f"group{g}"] = {
                label: {k: pair[k] for k in ("category", "images", "hits", "first_rank") if k in pair}
                for label, pair in (found.get("per_pair") or {}).items()
            }
        means[str(b)] = mean_of(values)
    return means, cases


def rerank_entries(zoo: Path, groups: Sequence[int]) -> list[Entry]:
    """BUTR+RR of each group with its BUTD baseline, for the groups the zoo has both of."""
    names = {c.name for c in load_manifest(zoo).captioners}
    return [
        Entry(g, f"butr_g{g}", f"butr_g{g}", f"butd_g{g}")
        for g in groups
        if {f"butr_g{g}", f"butd_g{g}"} <= names
    ]
