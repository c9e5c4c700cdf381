"""The split's paired rounds (``loadtests.bench.paired``): each round's pair compared, then the medians."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from loadtests.bench.paired import paired_split, paired_table


def row(processes: int, round_: int, captions: float, p50: float, cpu: float, clients: int = 64) -> dict:
    return {
        "gateways": 1,
        "api_processes": processes,
        "round": round_,
        "clients": clients,
        "captions_per_s": captions,
        "p50_ms": p50,
        "cpu_ms_per_caption": {"server": cpu, "client": 0.1},
    }


def test_each_round_is_compared_with_its_own_pair_and_the_medians_reported() -> None:
    load = [
        row(1, 1, 800.0, 80.0, 1.5),
        row(2, 1, 1000.0, 70.0, 2.0),  # 1.25
        row(1, 2, 700.0, 90.0, 1.6),
        row(2, 2, 980.0, 60.0, 1.9),  # 1.40: the slow round of one process is its own pair's
        row(1, 3, 820.0, 78.0, 1.5),
        row(2, 3, 902.0, 75.0, 2.1),  # 1.10
    ]
    (entry,) = paired_split(load)
    assert (entry["api_processes"], entry["against"], entry["rounds"], entry["clients"]) == (2, 1, 3, 64)
    assert entry["ratio"] == {"median": 1.25, "range": [1.1, 1.4]}
    # the median of the ratios, not the ratio of the medians (980 / 800 = 1.225)
    assert entry["captions_per_s"]["median"] == 980.0
    assert entry["against_captions_per_s"]["median"] == 800.0
    assert entry["p50_ms_added"] == {"median": -10.0, "range": [-30.0, -3.0]}
    assert entry["cpu_ms_per_caption_added"]["median"] == pytest.approx(0.5)
    assert entry["cpu_ms_per_caption_added"]["range"] == pytest.approx([0.3, 0.6])


def test_rounds_missing_one_setup_are_left_out_and_client_counts_kept_apart() -> None:
    load = [
        row(1, 1, 100.0, 5.0, 3.0, clients=1),
        row(2, 1, 90.0, 6.0, 3.4, clients=1),
        row(1, 1, 800.0, 80.0, 1.5),
        row(2, 1, 1000.0, 70.0, 2.0),
        row(1, 2, 810.0, 80.0, 1.5),  # round 2 of the split never ran
    ]
    one, sixty_four = paired_split(load)
    assert (one["clients"], one["rounds"], one["ratio"]["median"]) == (1, 1, 0.9)
    assert one["p50_ms_added"]["median"] == 1.0
    assert (sixty_four["clients"], sixty_four["rounds"], sixty_four["ratio"]["median"]) == (64, 1, 1.25)


def test_rows_without_rounds_are_one_round_and_one_count_compares_nothing() -> None:
    plain = [
        {k: v for k, v in r.items() if k != "round"}
        for r in (row(1, 1, 800, 80, 1.5), row(3, 1, 880, 75, 1.9))
    ]
    (entry,) = paired_split(plain)
    assert (entry["api_processes"], entry["rounds"], entry["ratio"]["median"]) == (3, 1, 1.1)
    assert paired_split([row(1, 1, 800, 80, 1.5), row(1, 2, 700, 80, 1.5)]) == []


def test_the_table_shows_medians_and_ranges() -> None:
    table = paired_table(paired_split([row(1, 1, 800, 80, 1.5), row(2, 1, 1000, 70, 2.0)]))
    cells = [list(column.cells) for column in table.columns]
    assert cells[2] == ["2 vs 1"]
    assert cells[5] == ["1.25 [1.25, 1.25]"]
    assert cells[6] == ["-10.00 [-10.00, -10.00]"]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    text = console.export_text()
    assert "[min, max]" in text and "1.25 [1.25, 1.25]" in text  # brackets printed, not read as markup


def test_the_bench_tables_tell_rounds_and_process_counts_apart() -> None:
    from loadtests.bench.table import _setup_cells, _setup_columns

    plain = [{"clients": 1}, {"clients": 8, "gateways": 1, "api_processes": 1}]
    assert _setup_columns(plain) == ()
    rounds = [row(1, 1, 800, 80, 1.5), row(2, 1, 1000, 70, 2.0)]
    columns = _setup_columns(rounds)
    assert columns == ("round", "API procs")
    assert [_setup_cells(r, columns) for r in rounds] == [["1", "1"], ["1", "2"]]


def test_rounds_without_anything_to_repeat_are_refused() -> None:
    import argparse

    from loadtests.bench.bench import add_arguments, bench

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for argv in (["--rounds", "3"], ["--rounds", "3", "--api-processes", "2"]):
        with pytest.raises(SystemExit, match="--rounds repeats"):
            bench(parser.parse_args(argv))
