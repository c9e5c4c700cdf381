"""The reproduction's intervals: recomputed from the committed per-group evaluations
(``reports/systematicity_<g>_test.json``, per pair its images and hits per K), they are the ones the
committed report states, near those an independent bootstrap found, and the targets hold — or not —
on the intervals' bounds as the report says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compcap_lab.studies.report.uncertainty import intervals, row_strata
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
    assert sum(len(p) for s in strata for p in s) == 2030
    assert sum(sum(p) for s in strata for p in s) == 182  # the report's hit count at K = 5
    assert sum(1 for s in strata for p in s if sum(p) == 0) == 10  # pairs BUTR+RR never recalls
    with pytest.raises(ValueError, match="hits"):
        binary_units(3, 2)


def test_the_stored_first_ranks_are_the_stored_counts() -> None:
    """Each evaluation's per-image first ranks (what the paired tests read) give its per-pair counts."""
    raw = from_group_files(committed())["raw"]
    checked = 0
    for evaluation in raw.values():
        for result in evaluation["results"]:
            for pair in (result["per_pair"] or {}).values():
                ranks = list(pair["first_rank"].values())
                assert len(ranks) == pair["images"]
                for k, hits in pair["hits"].items():
                    assert sum(1 for r in ranks if r is not None and r <= int(k)) == hits
                checked += 1
    assert checked > 200


def _pooled_bootstrap(pairs: list[list[float]], resamples: int = 2000, seed: int = 11) -> tuple[float, float]:
    """An independent 95% interval: pairs pooled over groups, resampled, then images within each drawn
    pair (not the report's code: numpy's default generator, one loop)."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(p) for p in pairs]
    means = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(arrays), len(arrays))
        means.append(np.mean([rng.choice(arrays[i], len(arrays[i])).mean() for i in drawn]))
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def test_the_intervals_are_near_an_independent_check() -> None:
    """A bootstrap written here, pooling the pairs over groups, against the report's (pairs drawn within
    their groups): the bounds differ by about a standard error at most — within 1.5 points of Recall@5."""
    collected = from_group_files(committed())
    found = committed()["intervals"]
    for row in ("BUTD", "BUTR+RR", "BUTD+VSE++", "FULL"):
        low, high = _pooled_bootstrap([p for s in row_strata(collected, row) for p in s])
        mine = found["recall_at_k"][row]["5"]
        assert abs(mine["low"] - low) < 0.015 and abs(mine["high"] - high) < 0.015, (row, mine, low, high)


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
