"""The reports' reading of p-values (``compcap_lab.studies.report.family``): Holm–Bonferroni over a family
against hand-computed values, the permutation floor printed as a bound, the seed study's cluster bootstrap
over the pairs its seeds share, the B sweep's intervals and paired tests once the sweep stores its cases,
and the committed reports saying so."""

from __future__ import annotations

import importlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from compcap_lab.studies.report.family import (
    at_floor,
    floor_bound,
    holm,
    holm_texts,
    p_phrase,
    p_text,
    verdict,
)
from compcap_lab.studies.report.markdown import sweep_lines
from compcap_lab.studies.report.uncertainty import cluster_interval, sweep_tests
from compcap_lab.studies.seeds import reanalyse

REPORTS = Path(__file__).resolve().parents[3] / "reports"
# the module, not the function ``report.collect`` that the package exports under the same name
collect_module = importlib.import_module("compcap_lab.studies.report.collect")


# ------------------------------------------------------------------------------------------------- Holm
def test_holm_is_the_hand_computed_step_down() -> None:
    """m = 4: sorted 0.005, 0.01, 0.03, 0.04 → 4 × 0.005 = 0.02, 3 × 0.01 = 0.03, 2 × 0.03 = 0.06,
    max(0.06, 1 × 0.04) = 0.06 — returned in the order given."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # 2 × 0.5 capped at 1, and monotone
    assert holm([0.2]) == [0.2] and holm([]) == []
    # the reproduction's five control tests: 5 × 0.0001, then 3 × 0.0841, 2 × 0.352 = 0.704 ≥ 0.583
    raw = [0.583, 0.0001, 0.0001, 0.0841, 0.352]
    assert holm(raw) == pytest.approx([0.704, 0.0005, 0.0005, 0.2523, 0.704])
    with pytest.raises(ValueError, match="p-values"):
        holm([0.1, 1.5])


def test_holm_never_lowers_a_p_value_and_keeps_their_order() -> None:
    raw = [0.03, 0.001, 0.2, 0.04, 0.04, 0.9]
    adjusted = holm(raw)
    assert all(a >= p for a, p in zip(adjusted, raw, strict=True))
    ranked = sorted(range(len(raw)), key=lambda i: raw[i])
    assert [adjusted[i] for i in ranked] == sorted(adjusted)


# ------------------------------------------------------------------------------------- permutation floor
def test_the_permutation_floor_reads_as_a_bound() -> None:
    assert at_floor(1 / 10_001, 10_000) and at_floor(0.0001, 10_000)  # stored rounded
    assert not at_floor(2 / 10_001, 10_000) and not at_floor(0.0002, 10_000)
    assert floor_bound(10_000) == pytest.approx(0.0002)
    assert floor_bound(1_000) == pytest.approx(0.002) and floor_bound(9_999) == pytest.approx(0.0002)
    assert p_text(0.0001) == "< 0.0002" and p_text(0.0841) == "0.0841"
    assert p_phrase({"p_value": 0.0001, "permutations": 10_000}) == "p < 0.0002, 10 000 permutations"
    assert p_phrase({"p_value": 0.000999, "permutations": 1_000}, count=False) == "p < 0.002"
    assert p_phrase({"p_value": 0.583, "permutations": 10_000}) == "p = 0.583"


def test_an_adjusted_p_value_that_a_floor_decides_is_a_bound_too() -> None:
    tests = {
        name: {"p_value": p, "permutations": 10_000}
        for name, p in zip("abcde", [0.583, 0.0001, 0.0001, 0.0841, 0.352], strict=True)
    }
    # 5 × 0.0002 = 0.001 bounds the two floored tests; the others are plain values
    assert holm_texts(tests) == {"a": "0.704", "b": "< 0.001", "c": "< 0.001", "d": "0.252", "e": "0.704"}


def test_the_verdict_rule_labels_a_small_p_beside_an_interval_over_0_mixed() -> None:
    over_0 = {"estimate": -0.114, "low": -0.275, "high": 0.026}
    assert verdict({"difference": over_0, "p_value": 0.0001}) == "mixed"
    assert verdict({"difference": over_0, "p_value": 0.3}) == "not significant"


# ---------------------------------------------------------------------------------- cluster bootstrap
def test_the_cluster_bootstrap_draws_pairs_and_one_set_of_images_for_all_seeds() -> None:
    # two pairs, each the same for both seeds and all its images: only the pairs vary
    found = cluster_interval([[[0.0] * 4, [0.0] * 4], [[1.0] * 4, [1.0] * 4]])
    assert found is not None
    assert found.estimate == 0.5 and found.low == 0.0 and found.high == 1.0
    assert found.groups == 2 and found.units == 16
    # one pair whose two seeds hit opposite images: drawing the images once for both seeds keeps the
    # mean over seeds at 0.5 in every resample (independent draws per seed would not)
    one = cluster_interval([[[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]])
    assert one is not None and one.low == one.high == 0.5
    assert cluster_interval([]) is None
    with pytest.raises(ValueError, match="table"):
        cluster_interval([[[1.0, 0.0], [1.0]]])


# ---------------------------------------------------------------------------------------------- B sweep
def _per_pair(firsts: dict[str, list[int | None]]) -> dict[str, Any]:
    return {
        label: {
            "category": "colour_animate",
            "images": len(ranks),
            "hits": {k: sum(1 for r in ranks if r is not None and r <= int(k)) for k in "12345"},
            "first_rank": {str(i): r for i, r in enumerate(ranks)},
        }
        for label, ranks in firsts.items()
    }


def _sweep_collected() -> dict[str, Any]:
    """One group, two pairs of 10 images: B = 100 hits the first 6 images of each, B = 5 the first 1."""
    cases = {
        beam: {
            "group1": _per_pair(
                {p: [3 if i < n else None for i in range(10)] for p in ("red dog", "big cat")}
            )
        }
        for beam, n in (("5", 1), ("100", 6))
    }
    return {"rerank_sweep": {"5": 0.1, "100": 0.6}, "rerank_sweep_cases": cases}


def test_the_sweep_gets_intervals_and_a_paired_test_against_b_100_from_its_cases() -> None:
    collected = _sweep_collected()
    found = sweep_tests(collected)
    assert found is not None and found["reference"] == "100"
    assert found["recall_at_5"]["100"]["estimate"] == pytest.approx(0.6)
    test = found["paired"]["B = 5 vs B = 100"]
    assert test["difference"]["estimate"] == pytest.approx(-0.5) and test["difference"]["high"] < 0
    assert test["p_value"] < 0.01 and verdict(test) == "lower"
    assert found["family"]["tests"] == ["B = 5 vs B = 100"]
    lines = "\n".join(sweep_lines(collected, {"rerank_sweep": found}, 0.02, 100))
    assert "| R@5 [95% interval] | 10.0 [" in lines and "| B − 100 [95% interval] | -50.0 [" in lines
    assert re.search(r"\| p \(sign-flip\) \| 0\.00\d+ \| — \|", lines)
    assert "| p, Holm over the 1 tests |" in lines


def test_a_sweep_that_stored_its_means_only_says_why_it_has_no_interval() -> None:
    collected = {"rerank_sweep": {"5": 0.03, "100": 0.128}}
    assert sweep_tests(collected) is None
    lines = "\n".join(sweep_lines(collected, {}, 0.02, 100))
    assert "| R@5 | 3.0 | 12.8 |" in lines
    assert "These have no interval and no paired test against B = 100" in lines
    assert "now stores each run's per-pair first ranks (`rerank_sweep_cases`)" in lines


def test_the_sweep_stores_each_runs_first_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rerank_sweep`` keeps, per B and group, the run's per-pair counts and first ranks."""
    calls: list[int] = []

    def fake_evaluate(*args: Any, rerank_beam_size: int = 100, **kwargs: Any) -> dict[str, Any]:
        calls.append(rerank_beam_size)
        n = 1 if rerank_beam_size < 100 else 6
        per_pair = _per_pair({"red dog": [2 if i < n else None for i in range(10)]})
        per_pair["red dog"]["by_bucket"] = {"1": {}}  # not kept: the paired tests need none of it
        return {
            "results": [
                {
                    "captioner": "butr_g1",
                    "ranker": "butr_g1",
                    "recall_at_5_mean": n / 10,
                    "per_pair": per_pair,
                }
            ]
        }

    monkeypatch.setattr(collect_module, "evaluate", fake_evaluate)
    means, cases = collect_module.rerank_sweep(Path("zoo"), Path("data"), [1], 0.02, candidates=(5, 100))
    assert calls == [5, 100] and means == {"5": 0.1, "100": 0.6}
    stored = cases["5"]["group1"]["red dog"]
    assert set(stored) == {"category", "images", "hits", "first_rank"} and stored["first_rank"]["0"] == 2
    found = sweep_tests({"rerank_sweep": means, "rerank_sweep_cases": cases})
    assert found is not None and "B = 5 vs B = 100" in found["paired"]


# ------------------------------------------------------------------------------------ committed reports
pytestmark_reports = pytest.mark.skipif(
    not (REPORTS / "seeds.json").is_file(), reason="no committed seeds report"
)


@pytestmark_reports
def test_the_committed_seeds_report_is_recomputed_from_its_stored_evaluations(tmp_path: Path) -> None:
    """``seeds.json`` (its cluster-bootstrap pooled tests and Holm family included) and ``seeds.md`` come
    back exactly from ``reproduction.json`` and ``seeds/seed<N>/`` — the per-case files it names."""
    committed = json.loads((REPORTS / "seeds.json").read_text(encoding="utf-8"))
    shutil.copy(REPORTS / "seeds.json", tmp_path / "seeds.json")
    shutil.copy(REPORTS / "reproduction.json", tmp_path / "reproduction.json")
    for where in committed["evaluations"].values():
        if where["source"] != "reproduction.json":
            shutil.copytree(REPORTS / where["source"], tmp_path / where["source"])
    assert reanalyse(tmp_path) == committed
    assert (tmp_path / "seeds.md").read_text(encoding="utf-8") == (REPORTS / "seeds.md").read_text(
        encoding="utf-8"
    )
    pooled = committed["pooled"]["BUTR+RR vs BUTD+VSE++"]["difference"]
    independent = committed["pooled_independent"]["BUTR+RR vs BUTD+VSE++"]["difference"]
    assert pooled["groups"] == 6 and independent["groups"] == 18 and pooled["units"] == independent["units"]
    assert len(committed["family"]["tests"]) == 4 * len(committed["pooled"])  # 3 seeds + pooled


@pytestmark_reports
def test_the_committed_reports_state_the_joint_training_result_as_what_it_is() -> None:
    reproduction = (REPORTS / "reproduction.md").read_text(encoding="utf-8")
    seeds = (REPORTS / "seeds.md").read_text(encoding="utf-8")
    stored = json.loads((REPORTS / "reproduction.json").read_text(encoding="utf-8"))["intervals"]
    main = stored["paired"]["BUTR+RR vs BUTD+VSE++"]["difference"]
    assert "no difference is detected. That is an absence of evidence" in reproduction
    assert f"the interval allows up to {100 * main['high']:+.1f} points in BUTR+RR's favour" in reproduction
    assert "Head on, both rankers on the same BUTD beams (BUTD+BUTR head vs BUTD+VSE++" in reproduction
    assert "p = 0.0841 (Holm 0.252)" in reproduction
    assert (
        "| p-value, Holm |" in reproduction and "The family: the 5 paired tests of this table" in reproduction
    )
    assert "These have no interval and no paired test against B = 100" in reproduction
    assert "**Joint training.** Pooled over 3 seeds" in seeds and "after Holm over the family" in seeds


@pytest.mark.parametrize(
    "name",
    [
        "reproduction.md",
        "seeds.md",
        "counterfactual.md",
        "counterfactual_zoo/counterfactual.md",
        "search_hook.md",
    ],
)
def test_no_rendered_report_prints_the_permutation_floor_as_a_value(name: str) -> None:
    path = REPORTS / name
    if not path.is_file():
        pytest.skip(f"no committed {name}")
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"p = 0\.0001\b", text) and not re.search(r"\| 0\.0001 \|", text)
    floors = re.findall(r"p < 0\.0002", text) + re.findall(r"\| < 0\.0002 \|", text)
    assert floors, "every one of these reports has tests at the floor"


def test_the_counterfactual_rows_with_a_small_p_and_an_interval_over_0_are_mixed() -> None:
    path = REPORTS / "counterfactual.md"
    if not path.is_file():
        pytest.skip("no committed counterfactual report")
    for line in path.read_text(encoding="utf-8").splitlines():
        cell = re.search(
            r"\| ([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\], p ([<=]) ([\d.]+)(, mixed)? \|$", line
        )
        if not cell:
            continue
        low, high = float(cell.group(2)), float(cell.group(3))
        if 0.0 in (low, high):
            continue  # a bound rounded to 0: which side it lies is not printed
        small = cell.group(4) == "<" or float(cell.group(5)) < 0.05
        assert bool(cell.group(6)) == ((low <= 0 <= high) == small), line
