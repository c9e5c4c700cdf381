"""``compcap bench`` end to end on the tiny repository with very short phases: it starts a real
gateway, loads it at two client counts and writes the JSON the issue specifies. Figures are not
checked (speed belongs in the benchmark's output, not in tests); the bookkeeping is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.load.cpu import bounds_of_limit
from service.backends.onnxruntime.backend import usable_cores

pytestmark = pytest.mark.integration


def test_bench_writes_its_json(tiny_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable, "-m", "service.cli", "bench", "--repo", str(tiny_repo), "--clients", "1,4",
        "--duration", "1", "--single-runs", "5", "--naive-clients", "4", "--naive-gateway-clients", "2",
        "--max-rows", "20", "--curve-seconds", "0.05", "--images", "4", "--json", str(out),
        "--baseline", "torch", "--floor-clients", "2",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=300, capture_output=True)
    result = json.loads(out.read_text())
    assert result["backend"] == "onnxruntime" and result["beam_size"] == 5
    assert result["single_decode_ms"] > 0 and result["rows_per_caption"] >= 1
    limit = result["limit"]
    assert limit["best_batch_rows"] in (5, 10, 20) and limit["rows_per_s"] > 0
    assert limit["ideal_captions_per_s"] == pytest.approx(
        limit["rows_per_s"] / result["rows_per_caption"], rel=0.01
    )
    assert result["naive"]["captions_per_s"] > 0
    naive_http = result["naive"]["gateway"]
    assert naive_http["clients"] == 2 and naive_http["sent"] == naive_http["received"] > 0
    compute = result["compute_limit"]
    assert 0 < compute["step_share"] < 1 and compute["captions_per_s"] < limit["ideal_captions_per_s"]
    assert {"visual_encoder", "butr_step", "butr_text"} <= set(compute["ms_per_caption"])
    assert [row["clients"] for row in result["load"]] == [1, 4]
    for row in result["load"]:
        assert row["sent"] == row["received"] > 0 and row["errors_5xx"] == 0
        assert row["captions_per_s"] > 0 and row["p50_ms"] <= row["p99_ms"]
        assert row["mean_rows_per_call"] >= 1
        assert 0 < row["ceiling_of_limit"] <= compute["captions_per_s"] / limit["ideal_captions_per_s"] + 1e-3
        # the CPU the gateway and this load generator spent per caption, and the bounds it implies
        cpu = row["cpu_ms_per_caption"]
        assert cpu["server"] > 0 and cpu["client"] > 0
        assert 0 < cpu["server_main_thread"] < cpu["server"] and 0 < row["main_thread_busy"] <= 1.0
        # the step call's wall time in the gateway, and alone at the same rows (from the curve)
        assert row["step_ms_under_load"] > 0 and row["step_ms_alone"] > 0
        slowdown = row["step_ms_under_load"] / row["step_ms_alone"]
        assert row["step_slowdown"] == pytest.approx(slowdown, abs=0.006)  # printed to 2 decimals
        # and alone with the gateway's own threads per call (one mode of the curve: never faster than
        # the best of all modes), and the gateway's CPU above the models' own
        assert row["step_ms_alone_own"] >= row["step_ms_alone"] - 1e-3
        own = row["step_ms_under_load"] / row["step_ms_alone_own"]
        assert row["step_slowdown_own"] == pytest.approx(own, abs=0.006)
        model_ms = row["cpu_bounds_of_limit"]["model_cpu_ms_per_caption"]
        assert row["gateway_cpu_ms_above_models"] == pytest.approx(cpu["server"] - model_ms, abs=0.002)
        # the bounds follow from the figures above (their order depends on two runs' measured CPU:
        # the load generator's at this level and the floor's, so it is not asserted)
        bounds = row["cpu_bounds_of_limit"]
        assert bounds == bounds_of_limit(result, row)
        assert min(bounds.values()) > 0 and {"http_floor", "any_server"} <= set(bounds)
    # the HTTP floor answered every request, and cost CPU on both sides
    floor = result["floor"]
    assert floor["clients"] == 2 and floor["sent"] == floor["received"] > 0 and floor["errors_5xx"] == 0
    assert floor["errors_other"] == 0 and min(floor["cpu_ms_per_caption"].values()) > 0
    assert {"intra_op_threads", "cpu_ms_per_call"} <= set(result["step_curve"][0])
    # the curve's modes by their resolved threads per call: the gateway's own (auto) and another, where
    # the machine has more than one core
    assert len({p["intra_op_threads"] for p in result["step_curve"]}) == min(2, usable_cores())
    assert min(p["intra_op_threads"] for p in result["step_curve"]) >= 1
    baseline = result["baseline"]
    assert baseline["name"] == "torch" and [row["clients"] for row in baseline["load"]] == [1, 4]
    for row in baseline["load"]:  # the torch server really answered every request
        assert row["sent"] == row["received"] > 0 and row["errors_5xx"] == row["errors_other"] == 0
        assert row["captions_per_s"] > 0
