"""``compcap bench --profile`` samples a real gateway under load with py-spy: a flame graph is written,
the breakdown has samples, and the model calls and HTTP handling both show up in it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from loadtests.bench.bench import add_arguments
from loadtests.bench.profile import add_arguments as add_profile_arguments
from loadtests.bench.profile import profile


def test_profile_writes_flame_graph_and_breakdown(tiny_repo: Path, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    add_profile_arguments(parser)
    out = tmp_path / "prof"
    args = parser.parse_args(
        ["--repo", str(tiny_repo), "--profile", str(out), "--profile-clients", "4", "--duration", "2"]
    )
    assert profile(args) == 0
    assert (out / "flame.svg").read_text().lstrip().startswith("<?xml")
    result = json.loads((out / "breakdown.json").read_text())
    share = result["breakdown"]["share"]
    assert result["breakdown"]["samples"] > 50
    assert share["model calls"] > 0 and share["HTTP and parsing"] > 0
    assert result["load"]["errors_5xx"] == 0 and result["load"]["sent"] == result["load"]["received"]
