"""``compcap bench --compare-precision``: the bench at fp32 and int8 in turn (A B A B), medians and
ratios of each figure. The runs themselves are replaced by canned results."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

import loadtests.bench.bench as bench


def _result(precision: str, rows_per_s: float, captions: float) -> dict[str, Any]:
    return {
        "backend": "onnxruntime",
        "precision": precision,
        "model": "butr",
        "beam_size": 5,
        "single_decode_ms": 10.0,
        "rows_per_caption": 40.0,
        "limit": {"rows_per_s": rows_per_s, "ideal_captions_per_s": rows_per_s / 40, "best_batch_rows": 320},
        "compute_limit": {"captions_per_s": 100.0, "ms_per_caption": {"butr_step": 5.0}},
        "naive": {"captions_per_s": 50.0},
        "step_curve": [{"rows": 320, "ms_per_call": 4.0}],
        "load": [{"clients": 32, "captions_per_s": captions, "p50_ms": 90.0, "mean_rows_per_call": 100.0}],
    }


def test_compare_precision_alternates_and_reports_medians(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    figures = {
        "fp32": iter([(1000.0, 300.0), (1200.0, 320.0)]),
        "int8": iter([(1500.0, 330.0), (1700.0, 370.0)]),
    }

    def fake_run(args: argparse.Namespace) -> dict[str, Any]:
        order.append(args.precision)
        return _result(args.precision, *next(figures[args.precision]))

    monkeypatch.setattr(bench, "run", fake_run)
    monkeypatch.setattr(bench, "summary", lambda result: "")
    args = argparse.Namespace(rounds=2, clients=[32], precision=None)
    out = bench.compare_precision(args)
    assert order == ["fp32", "int8", "fp32", "int8"]
    assert out["comparison"]["step_limit_rows_per_s"] == {"fp32": 1100.0, "int8": 1600.0, "ratio": 1.455}
    assert out["comparison"]["captions_per_s_at_32"] == {"fp32": 310.0, "int8": 350.0, "ratio": 1.129}
    assert [r["precision"] for r in out["runs"]["int8"]] == ["int8", "int8"]


def test_precision_arguments() -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--compare-precision", "--rounds", "3"])
    assert (args.compare_precision, args.rounds, args.precision) == (True, 3, None)
    assert parser.parse_args(["--precision", "int8"]).precision == "int8"
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "int4"])
