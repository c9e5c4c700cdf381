"""``compcap-lab shadow-load`` runs end to end on the tiny repository: two gateways (without and with a
shadow at rate 1), A/B phases, every request sent answered, and the shadow really compared requests in B
(its counter moved; the latency ratio itself is the benchmark's business, README "Comparison")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compcap_lab.load.shadow_load import add_arguments, shadow_load


def test_shadow_load_reports_both_phases(tiny_repo: Path, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "shadow.json"
    args = parser.parse_args(
        ["--repo", str(tiny_repo), "--clients", "2", "--seconds", "2", "--rounds", "1", "--json", str(out)]
    )
    assert shadow_load(args) == 0
    result = json.loads(out.read_text())
    assert [p["shadow"] for p in result["phases"]] == [False, True]
    for phase in result["phases"]:
        assert phase["sent"] == phase["received"] > 0 and phase["errors_5xx"] == 0
    assert result["shadow"] == "butd" and result["captioner"] == "butr"
    assert result["shadow_outcomes"].get("compared", 0) > 0
    assert result["p50_ratio"] > 0
