"""``compcap-lab explain-report`` end to end on the tiny repository (its productivity probe set brings scene
graphs), and the claim checks on hand-made figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compcap_lab.studies.explanation_report import claims, render_markdown
from compcap_lab.studies.explanations import default_captioners, run_explain_report
from service.manifest import load_manifest


def test_the_study_runs_on_the_served_path_and_writes_tables_and_a_figure(
    tiny_repo: Path, tmp_path: Path
) -> None:
    report = run_explain_report(
        tiny_repo,
        tiny_repo / "probes" / "productivity",
        tmp_path,
        images=2,
        methods=("attention", "guided_backprop", "integrated_gradients"),
        n_steps=4,
    )
    assert report["images"] == 2
    assert list(report["captioners"]) == default_captioners(load_manifest(tiny_repo)) == ["butd", "butr"]
    entry = report["captioners"]["butr"]
    assert set(entry["methods"]) == {"attention", "guided_backprop", "integrated_gradients"}
    assert entry["methods"]["integrated_gradients"]["ig_n_steps"] == 4
    assert entry["ig_relative_delta_20"] >= 0 and entry["observer"]["ratio"] > 0
    for summary in entry["methods"].values():
        scores = [v for v in summary["grounding_score"].values() if v is not None]
        assert scores == sorted(scores)  # monotone in δ, averaged too
        for delta, found in summary["grounding_score_interval"].items():  # over captions
            value = summary["grounding_score"][delta]
            assert found is None or found["low"] <= value <= found["high"]
    written = json.loads((tmp_path / "explanations.json").read_text())
    assert written["captioners"].keys() == report["captioners"].keys()
    md = (tmp_path / "explanations.md").read_text()
    assert "| butr (BUTR) |" in md and "Pointing game" in md and "claims" in md
    assert (tmp_path / "explain_examples.png").stat().st_size > 10_000


def _method(gs0: float, gs_inf: float) -> dict[str, Any]:
    scores = {"0": gs0, "1": gs0, "3": gs_inf, "5": gs_inf, "inf": gs_inf}
    return {
        "grounding_score": scores,
        "pointing": {"nouns": 1, "accuracy": 1.0, "chance": 0.1},
        "ms_per_word": 1.0,
    }


def test_claims_name_the_leader_and_ties() -> None:
    def methods(sal: tuple[int, int], gbp: tuple[int, int], ig: tuple[int, int]) -> dict[str, Any]:
        return {
            "saliency": _method(*sal),
            "guided_backprop": _method(*gbp),
            "integrated_gradients": _method(*ig),
        }

    caps = {
        "tr": {"architecture": "Transformer", "methods": methods((70, 80), (60, 85), (75, 82))},
        "m2": {"architecture": "M2", "methods": methods((72, 80), (72, 79), (71, 80))},
    }
    lines = claims({"captioners": caps})
    assert "tr (Transformer): best gradient method at δ=0 is **Integrated Gradients**" in lines[0]
    assert "holds" in lines[0] and "does not hold" not in lines[0]
    assert "**Saliency = Guided Backprop**" in lines[1] and "does not hold" in lines[1]
    assert (
        "lowest at δ=0: 1 of 2 captioners (tr)" in lines[2]
        and "gains most from δ=0 to ∞: 1 of 2 (tr)" in lines[2]
    )
    assert "with 2 of 3 methods" in lines[3]
    for c in caps.values():
        c["quality"] = {
            "bleu1": 0.5,
            "bleu4": 0.2,
            "rouge_l": 0.4,
            "cider_d": 0.9,
            "nw": 0.3,
            "coverage": 0.5,
        }
    assert "| tr | 50.0 | 20.0 | 40.0 | 90.0 | 0.300 | 50.0 |" in render_markdown(
        {"captioners": caps, "images": 3, "data": "d", "n_steps": 50}
    )
