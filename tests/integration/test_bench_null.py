"""``compcap bench --backend null`` on the tiny repository with very short phases: real gateways on the
null backend (one, then two gateways; one and two API processes in paired rounds), loaded at two client
counts; the step and compute limits are reported skipped with the reason, and each load level has its
captions/s, the gateways' CPU ms per caption and captions/s per core. Figures are not checked (speed
belongs in the output), the bookkeeping is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_bench_null_reports_the_gateways_ceiling(tiny_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable, "-m", "service.cli", "bench", "--backend", "null", "--repo", str(tiny_repo),
        "--clients", "1,4", "--gateways", "1,2", "--seconds", "0.5", "--single-runs", "3",
        "--naive-clients", "2", "--naive-gateway-clients", "0", "--floor-clients", "0", "--images", "4",
        "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(cmd, check=True, timeout=120, capture_output=True, text=True)
    assert "the gateway's own ceiling" in done.stderr and "captions/s per core" in done.stderr
    result = json.loads(out.read_text())
    assert result["backend"] == "null" and result["step_curve"] == []
    for skipped in (result["limit"], result["compute_limit"]):
        assert "backend null" in skipped["skipped"]
    assert result["limit"]["ideal_captions_per_s"] is None
    assert result["single_decode_ms"] > 0 and result["rows_per_caption"] >= 1
    assert result["naive"]["captions_per_s"] > 0
    assert [(row["gateways"], row["clients"]) for row in result["load"]] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    for row in result["load"]:
        assert row["sent"] == row["received"] > 0 and row["errors_5xx"] == row["errors_other"] == 0
        assert row["captions_per_s"] > 0 and row["mean_rows_per_call"] >= 1
        cpu = row["cpu_ms_per_caption"]
        assert cpu["server"] > 0 and cpu["client"] > 0 and 0 < cpu["server_main_thread"] <= cpu["server"]
        assert set(cpu) == {"server", "server_main_thread", "client"}  # two gateways: their sums
        assert row["server_cores_used"] > 0
        assert row["captions_per_s_per_core"] == pytest.approx(
            row["captions_per_s"] / row["server_cores_used"], rel=1e-3
        )
        assert "ceiling_of_limit" not in row and "cpu_bounds_of_limit" not in row


def test_bench_null_compares_the_split_round_by_round(tiny_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable, "-m", "service.cli", "bench", "--backend", "null", "--repo", str(tiny_repo),
        "--clients", "2", "--api-processes", "1", "2", "--rounds", "2", "--seconds", "0.5",
        "--single-runs", "3", "--naive-clients", "2", "--naive-gateway-clients", "0", "--floor-clients", "0",
        "--images", "4", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(cmd, check=True, timeout=180, capture_output=True, text=True)
    assert "paired rounds" in done.stderr and "round 2 of 2" in done.stderr and "[min, max]" in done.stderr
    result = json.loads(out.read_text())
    # the setups in turn, round after round: whatever loads the machine meanwhile falls on both
    assert [(row["round"], row["api_processes"]) for row in result["load"]] == [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
    ]
    for row in result["load"]:
        assert row["sent"] == row["received"] > 0 and row["errors_5xx"] == row["errors_other"] == 0
    (pair,) = result["split_comparison"]
    assert (pair["api_processes"], pair["against"], pair["clients"], pair["rounds"]) == (2, 1, 2, 2)
    by_round = {row["round"]: {} for row in result["load"]}
    for row in result["load"]:
        by_round[row["round"]][row["api_processes"]] = row["captions_per_s"]
    ratios = sorted(r[2] / r[1] for r in by_round.values())
    assert pair["ratio"]["range"] == pytest.approx([round(ratios[0], 3), round(ratios[1], 3)], abs=1e-3)
    assert set(pair) >= {"p50_ms_added", "cpu_ms_per_caption_added", "captions_per_s"}
