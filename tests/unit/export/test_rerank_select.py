"""``choose_weight``: the development rule that fixes BUTR+RR's re-ranking weight."""

import pytest

from compcap_lab.studies.rerank_select import choose_weight


def sweep(**rows: tuple[float, float]) -> dict:
    return {"rows": {k.replace("w", "").replace("_", "."): {"recall_at_5": r, "cider_d_no_comb": c}
                     for k, (r, c) in rows.items()}}  # fmt: skip


def test_highest_recall_within_the_quality_bound() -> None:
    s = sweep(
        baseline=(0.04, 1.00), likelihood=(0.02, 0.95), w0=(0.12, 0.85), w0_05=(0.11, 0.93), w0_1=(0.10, 0.96)
    )
    assert choose_weight(s) == 0.05  # 0 is 15% below the baseline's CIDEr-D, 0.05 only 7%
    assert choose_weight(s, tolerance=0.2) == 0.0


def test_ties_go_to_the_smaller_weight_and_nothing_within_takes_the_best_cider() -> None:
    assert choose_weight(sweep(baseline=(0.0, 1.0), w0_1=(0.1, 0.95), w0_2=(0.1, 0.99))) == 0.1
    assert choose_weight(sweep(baseline=(0.0, 1.0), w0=(0.1, 0.5), w1=(0.05, 0.7))) == 1.0


def test_bad_tolerance_is_named() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        choose_weight(sweep(baseline=(0.0, 1.0), w0=(0.1, 1.0)), tolerance=1.0)
