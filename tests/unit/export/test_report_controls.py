"""The reproduction's control rows (BUTD's beams re-ranked by a ranker not trained with it) and
the paired tests between rows, computed from the first rank each evaluation stores per (pair, image);
and the seeds study built on them (``compcap-lab seeds``), on small hand-made evaluations."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from compcap_lab.studies.report.collect import rows_for
from compcap_lab.studies.report.family import verdict
from compcap_lab.studies.report.uncertainty import paired_tests, paired_units
from compcap_lab.studies.seeds import (
    across_seeds,
    independent_tests,
    markdown,
    pooled_tests,
    restrict,
    seed_figures,
)

PAIRS = ("red dog", "small cat", "blue car")


def _manifest(captioners: list[str], rankers: list[str]) -> Any:
    return SimpleNamespace(
        captioners=[SimpleNamespace(name=c) for c in captioners],
        rankers=[SimpleNamespace(name=r) for r in rankers],
    )


def test_control_rows_follow_butr_rr_for_the_groups_that_have_their_ranker() -> None:
    manifest = _manifest(["butd_g1", "butr_g1", "butd_g2", "butr_g2"], ["butr_g1", "butr_g2", "vsepp_g1"])
    rows = rows_for(manifest, [1, 2])
    labels = list(rows)
    assert labels[labels.index("BUTR+RR") + 1 : labels.index("BUTR+RR") + 3] == [
        "BUTD+VSE++",
        "BUTD+BUTR head",
    ]
    assert rows["BUTD+VSE++"] == [(1, "butd_g1", "vsepp_g1")]  # group 2 has no VSE++ of its own
    assert rows["BUTD+BUTR head"] == [(1, "butd_g1", "butr_g1"), (2, "butd_g2", "butr_g2")]
    assert "BUTD+VSE++" not in rows_for(_manifest(["butd_g1", "butr_g1"], ["butr_g1"]), [1])


def _result(cap: str, ranker: str | None, ranks: dict[str, list[int | None]]) -> dict[str, Any]:
    """An evaluation row whose pair ``label`` has images 0..n-1 with the given first ranks."""
    per_pair = {}
    for label, firsts in ranks.items():
        per_pair[label] = {
            "category": "colour_animate",
            "images": len(firsts),
            "hits": {k: sum(1 for r in firsts if r is not None and r <= int(k)) for k in "12345"},
            "first_rank": {str(i): r for i, r in enumerate(firsts)},
        }
    recall = {k: sum(p["hits"][k] / p["images"] for p in per_pair.values()) / len(per_pair) for k in "12345"}
    return {
        "captioner": cap,
        "ranker": ranker,
        "per_pair": per_pair,
        "recall_at_k": recall,
        "recall_at_5_mean": recall["5"],
        "per_category": {"colour_animate": {"recall": {"5": recall["5"]}}},
        "bleu4": 0.3,
        "meteor": None,
        "rouge_l": 0.5,
        "cider_d": 1.0,
    }


def _collected(better: int, images: int = 20) -> dict[str, Any]:
    """Group 1: BUTR+RR hits the first ``better`` images of every pair at rank 2, BUTD+VSE++ and BUTD
    none, BUTD+BUTR head the first image only."""
    hit = {p: [2 if i < better else None for i in range(images)] for p in PAIRS}
    none: dict[str, list[int | None]] = {p: [None] * images for p in PAIRS}
    one = {p: [5] + [None] * (images - 1) for p in PAIRS}
    runs = [
        ("butd_g1", None, none),
        ("butr_g1", None, none),
        ("butr_g1", "butr_g1", hit),
        ("butd_g1", "vsepp_g1", none),
        ("butd_g1", "butr_g1", one),
    ]
    results = [_result(c, r, ranks) for c, r, ranks in runs]
    return {
        "rows": {
            "BUTD": [[1, "butd_g1", None]],
            "BUTR": [[1, "butr_g1", None]],
            "BUTR+RR": [[1, "butr_g1", "butr_g1"]],
            "BUTD+VSE++": [[1, "butd_g1", "vsepp_g1"]],
            "BUTD+BUTR head": [[1, "butd_g1", "butr_g1"]],
        },
        "raw": {
            "group1/test": {"results": results, "images": images},
            "group1/test_no_comb": {"results": results},
        },
    }


def test_paired_units_are_the_hits_at_5_image_for_image() -> None:
    a, b = paired_units(_collected(better=4), "BUTR+RR", "BUTD+BUTR head")
    assert [sum(x) for x in a] == [4, 4, 4] and [sum(x) for x in b] == [1, 1, 1]
    assert all(x[0] == 1.0 and y[0] == 1.0 for x, y in zip(a, b, strict=True))  # image 0 in both


def test_paired_units_refuse_different_images_and_skip_old_reports() -> None:
    collected = _collected(better=4)
    results = collected["raw"]["group1/test"]["results"]
    del results[3]["per_pair"]["red dog"]["first_rank"]["0"]
    with pytest.raises(ValueError, match="different images"):
        paired_units(collected, "BUTR+RR", "BUTD+VSE++")
    for r in results:
        for p in r["per_pair"].values():
            p.pop("first_rank", None)
    assert paired_units(collected, "BUTR+RR", "BUTD+VSE++") == ([], [])
    assert paired_tests(collected) == {}


def test_paired_tests_find_a_real_difference_and_none_where_there_is_none() -> None:
    tests = paired_tests(_collected(better=10))
    rr_vsepp = tests["BUTR+RR vs BUTD+VSE++"]
    assert rr_vsepp["difference"]["estimate"] == pytest.approx(0.5)
    assert rr_vsepp["difference"]["low"] > 0 and rr_vsepp["p_value"] < 0.01
    assert verdict(rr_vsepp) == "higher"
    same = tests["BUTD+VSE++ vs BUTD"]
    assert same["difference"]["estimate"] == 0 and same["p_value"] == 1.0
    assert verdict(same) == "not significant"
    interval = {"low": -0.01, "high": 0.05, "estimate": 0.02}
    assert verdict({"difference": interval, "p_value": 0.02}) == "mixed"  # few pairs, one carrying it
    assert verdict({"difference": {**interval, "low": 0.001}, "p_value": 0.2}) == "mixed"
    assert verdict({"difference": {"low": -0.05, "high": -0.01}, "p_value": 0.001}) == "lower"


def test_the_seeds_study_summarises_and_pools_its_seeds() -> None:
    seeds = {"0": restrict(_collected(better=10), 1), "1": restrict(_collected(better=2), 1)}
    per_seed = {s: seed_figures(c, 1) for s, c in seeds.items()}
    assert per_seed["0"]["rows"]["BUTR+RR"]["recall_at_5"]["estimate"] == pytest.approx(0.5)
    across = across_seeds(per_seed)
    assert across["BUTR+RR"]["mean"] == pytest.approx(0.3) and across["BUTR+RR"]["min"] == pytest.approx(0.1)
    assert across["BUTR+RR"]["sd"] == pytest.approx(0.2828427, rel=1e-6)
    pooled = pooled_tests(list(seeds.values()))
    assert pooled["BUTR+RR vs BUTD"]["difference"]["estimate"] == pytest.approx(0.3)
    # the seeds share their 3 pairs: the pooled interval resamples the pairs as clusters
    assert pooled["BUTR+RR vs BUTD"]["difference"]["groups"] == 3
    assert pooled["BUTR+RR vs BUTD"]["difference"]["units"] == 120  # 3 pairs × 20 images × 2 seeds
    independent = independent_tests(list(seeds.values()))
    assert independent["BUTR+RR vs BUTD"]["difference"]["groups"] == 6  # 3 pairs × 2 seeds
    assert independent["BUTR+RR vs BUTD"]["p_value"] == pooled["BUTR+RR vs BUTD"]["p_value"]
    report = {
        "group": 1,
        "eval_data": "eval",
        "rerank_weight": 0.05,
        "rerank_beam": 100,
        "paired_method": "Paired.",
        "per_seed": per_seed,
        "across": across,
        "pooled": pooled,
    }
    text = markdown(report)
    assert "| BUTR+RR | 50.0 [" in text and "30.0 ± 28.3 [10.0, 50.0]" in text
    assert "- BUTR+RR vs BUTD+VSE++: pooled higher" in text
    assert "The family: the 15 paired tests of this table (5 comparisons, each per seed and pooled)" in text
    assert "p = 0.0001" not in text and "p < 0.0002" in text  # the permutation floor reads as a bound


def test_a_bad_plan_is_refused_before_any_work(tmp_path: Path) -> None:
    from compcap_lab.pipeline.zoo import build_zoo

    with pytest.raises(ValueError, match="plan: unknown architecture 'lstm'"):
        build_zoo(tmp_path / "zoo", preset="tiny", plan=[("lstm", 1)])
    with pytest.raises(ValueError, match="plan: group 3 is not one of groups"):
        build_zoo(tmp_path / "zoo", preset="tiny", groups=(1,), plan=[("butd", 3)])
    assert not (tmp_path / "zoo").exists() and not (tmp_path / "zoo.work").exists()
