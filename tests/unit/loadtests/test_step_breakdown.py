"""``compcap_lab.steps.breakdown`` on the tiny repository's step (CPU provider): every way of calling it
runs — host arrays, the served path with the memory kept on the device, everything bound on the device —
and the figures it derives are consistent (no timing is compared: the machine's speed is not tested)."""

from __future__ import annotations

from pathlib import Path

from compcap_lab.steps.breakdown import breakdown


def test_each_way_of_calling_the_step_runs(tiny_repo: Path) -> None:
    result = breakdown(tiny_repo, "cpu", rows=[5, 10], seconds=0.01)
    assert sorted(result) == [5, 10]
    for row in result.values():
        assert set(row) == {"host_ms", "served_ms", "device_ms", "copies_ms"}
        assert all(value > 0 for key, value in row.items() if key != "copies_ms")
        assert row["copies_ms"] == max(0.0, row["host_ms"] - row["device_ms"])
