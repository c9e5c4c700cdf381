"""The reproduction's intervals (issue 41, point 1): recomputed from the committed per-group evaluations
(``reports/systematicity_<g>_test.json``, per pair its images and hits per K), they are the ones the
committed report states, near those an independent bootstrap found, and the targets hold — or not —
on the intervals' bounds as the report says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from export.studies.report.uncertainty import intervals, row_strata
from service.evaluation.intervals import binary_units, ratio_interval, stratified_interval

REPORTS = Path(__file__).resolve().parents[3] / "reports"
pytestmark = pytest.mark.skipif(not (REPORTS / "reproduction.json").is_file(), reason="no committed report")


def committed() -> dict[str, Any]:
    return dict(json.loads((REPORTS / "reproduction.json").read_text(encoding="utf-8")))


def from_group_files(stored: dict[str, Any]) -> dict[str, Any]:
    """The report's inputs rebuilt from the per-group JSONs alone (the rows from the stored report)."""
    raw = {
        f"group{g}/{s}": json.loads((REPORTS / f"systematicity_{g}_{s}.json").read_text(encoding="utf-8"))
        for g in (1, 2, 3, 4)
        for s in ("test", "test_no_comb")
    }
    return {"rows": stored["rows"], "raw": raw}


def test_the_intervals_recomputed_from_the_group_files_are_the_committed_ones() -> None:
    stored = committed()
    assert intervals(from_group_files(stored)) == stored["intervals"]


def test_a_pair_hit_vector_comes_back_from_its_counts() -> None:
    collected = from_group_files(committed())
    strata = row_strata(collected, "BUTR+RR")
    assert [len(s) for s in strata] == [6, 6, 6, 6]
    assert sum(len(p) for s in strata for p in s) == 2032
    assert sum(sum(p) for s in strata for p in s) == 176  # the report's hit count at K = 5
    assert sum(1 for s in strata for p in s if sum(p) == 0) == 8  # pairs BUTR+RR never recalls
    with pytest.raises(ValueError, match="hits"):
        binary_units(3, 2)


def test_the_intervals_are_near_an_independent_check() -> None:
    """An independent check (issue 41) bootstrapped pairs pooled over groups and images: BUTD
    [1.3, 6.2], BUTR+RR [5.4, 19.3], FULL [12.2, 28.1] (Recall@5 ×100), the ratio BUTR+RR / BUTD
    [2.1, 6.5]. Drawing the pairs within their groups and another seed move a bound by at most about a
    standard error; each bound here is within 1.5 of the check's (0.6 for the ratio's lower bound)."""
    found = committed()["intervals"]
    check = {"BUTD": (1.3, 6.2), "BUTR+RR": (5.4, 19.3), "FULL": (12.2, 28.1)}
    for row, (low, high) in check.items():
        mine = found["recall_at_k"][row]["5"]
        assert abs(100 * mine["low"] - low) < 1.5 and abs(100 * mine["high"] - high) < 1.5, (row, mine)
    ratio = found["ratios"]["BUTR+RR / BUTD"]
    assert abs(ratio["low"] - 2.1) < 0.6 and abs(ratio["high"] - 6.5) < 1.5, ratio


def test_another_seed_gives_the_same_interval_within_its_monte_carlo_error() -> None:
    collected = from_group_files(committed())
    a = stratified_interval(row_strata(collected, "BUTR+RR"), seed=0)
    b = stratified_interval(row_strata(collected, "BUTR+RR"), seed=7)
    assert a is not None and b is not None
    assert abs(a.low - b.low) < a.se / 2 and abs(a.high - b.high) < a.se / 2


def test_the_targets_are_asserted_on_the_interval_bounds() -> None:
    """BUTR+RR ≥ 2× BUTD holds on the ratio's lower bound; FULL ≥ 1.5× BUTR+RR holds only on the point
    estimate — and the committed report says exactly that."""
    collected = from_group_files(committed())
    rr_butd = ratio_interval(row_strata(collected, "BUTR+RR"), row_strata(collected, "BUTD"))
    full_rr = ratio_interval(row_strata(collected, "FULL"), row_strata(collected, "BUTR+RR"))
    assert rr_butd is not None and rr_butd.low >= 2.0
    assert full_rr is not None and full_rr.estimate >= 1.5 > full_rr.low
    text = (REPORTS / "reproduction.md").read_text(encoding="utf-8")
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^\| (BUTR\+RR mean|FULL) .*? \| (yes|no|—) \| (yes|no) \|$", text, re.M)
    }
    assert rows == {"BUTR+RR mean": ("yes", "yes"), "FULL": ("no", "yes")}
