"""``compcap-lab probe-load`` runs end to end on the tiny repository: a gateway, A/B phases, a probe job
started, measured and cancelled; every request sent was answered. (The figures themselves are the
benchmark's business, README "Live probes": a 2-core CI machine makes them noise.)"""

from __future__ import annotations

import json
from pathlib import Path

from compcap_lab.load.probe_load import add_arguments, probe_load


def test_probe_load_reports_both_phases(tiny_repo: Path, tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "load.json"
    args = parser.parse_args(
        ["--repo", str(tiny_repo), "--clients", "2", "--seconds", "2", "--rounds", "1", "--settle", "0.2",
         "--probe-beam", "8", "--json", str(out)]
    )  # fmt: skip
    assert probe_load(args) == 0
    result = json.loads(out.read_text())
    assert [p["probe"] for p in result["phases"]] == [False, True]
    for phase in result["phases"]:
        assert phase["sent"] == phase["received"] > 0 and phase["errors_5xx"] == 0
    assert result["phases"][1]["probe_status"] in ("running", "succeeded")
    assert result["p50_ratio"] > 0 and result["probe_images_per_s"] >= 0
