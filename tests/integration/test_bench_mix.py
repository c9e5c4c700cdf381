"""``compcap bench --mix`` runs end to end on the tiny repository: every scenario's client kinds really
ran (the junk senders got 400s, the hang-up clients hung up, the wide clients got 200s), nothing was
lost, and the within-round ratios line up with the per-round figures. The figures themselves are the
benchmark's business (README "Performance")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from loadtests.bench.bench import add_arguments
from loadtests.bench.mix import add_arguments as add_mix_arguments
from loadtests.bench.mix import mix, mix_ratios, scenarios


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    add_mix_arguments(parser)
    return parser.parse_args(list(argv))


def test_mix_runs_every_kind_of_client(tiny_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "mix.json"
    args = _args(
        "--mix", "--repo", str(tiny_repo), "--duration", "2", "--mix-users", "2", "--rows-users", "2",
        "--mix-scenarios", "wide,hang-up,junk", "--json", str(out),
    )  # fmt: skip
    assert mix(args) == 0
    result = json.loads(out.read_text())
    (done,) = result["rounds"]
    assert list(done) == ["alone", "wide", "hang-up", "junk"]  # the reference joined on its own
    for scenario in done.values():
        assert scenario["lost"] == 0 and scenario["errors_5xx"] == 0
        assert scenario["traffic"]["users"]["statuses"].get("200", 0) > 0
    assert done["junk"]["traffic"]["junk"]["statuses"].keys() == {"400"}
    hang = done["hang-up"]["traffic"]["hang-up"]
    assert hang["hung_up"] > 0 and hang["sent"] == hang["hung_up"] + hang["received"]
    # past their burst the abandoners (their own address) are held back before any work
    assert done["hang-up"]["abandoned_by_stage"].get("paced", 0) > 0
    assert done["wide"]["traffic"]["beam-100"]["statuses"].get("200", 0) > 0
    assert all(s["gateway_cores"] > 0 and s["generator_cores"] > 0 for s in done.values())
    wide = result["summary"]["wide"]["users_ratio"]["median"]
    assert wide == pytest.approx(
        done["wide"]["users_captions_per_s"] / done["alone"]["users_captions_per_s"], abs=1e-3
    )


def test_ratios_are_taken_within_a_round() -> None:
    chosen = [s for s in scenarios("m", 4, 4) if s.name in ("alone", "junk")]

    def point(cps: float, rows: float) -> dict[str, float | int | None]:
        return {
            "users_captions_per_s": cps,
            "users_p50_ms": 10.0,
            "step_rows_per_s": rows,
            "errors_5xx": 0,
            "lost": 0,
        }

    rounds = [
        {"alone": point(100, 1000), "junk": point(90, 900)},
        {"alone": point(50, 500), "junk": point(40, 400)},  # a slower round: its own ratio
    ]
    summary = mix_ratios(rounds, chosen)
    assert summary["junk"]["users_ratio"] == {"median": 0.85, "spread": 0.1}
    assert summary["alone"]["users_ratio"] == {"median": 1.0, "spread": 0.0}
    assert summary["junk"]["users_captions_per_s"] == {"median": 65.0, "spread": 50.0}
