"""``compcap bench --baseline transformers --rounds``'s pairing (``paired_peers``): each round's CompCap
figure against the same round's peer, the median ratio and its range over rounds; rounds a setup missed
are left out."""

from __future__ import annotations

from loadtests.bench.peer_rounds import BATCHED, COMPCAP, PER_REQUEST, paired_peers


def _row(setup: str, round_: int, clients: int, per_s: float, **extra: float) -> dict[str, float | str]:
    return {"setup": setup, "round": round_, "clients": clients, "captions_per_s": per_s, **extra}


def test_each_round_is_compared_with_its_own_peers() -> None:
    rows = [
        _row(COMPCAP, 1, 8, 2.0, cores_used=1.8, peak_mb=2000.0, p50_ms=3300.0),
        _row(BATCHED, 1, 8, 1.0, cores_used=2.0, peak_mb=1500.0),
        _row(COMPCAP, 2, 8, 3.0, cores_used=1.9, peak_mb=2100.0, p50_ms=3000.0),
        _row(BATCHED, 2, 8, 2.0, cores_used=2.0, peak_mb=1500.0),
        _row(COMPCAP, 3, 8, 9.0),  # no peer in round 3: left out
        _row(PER_REQUEST, 1, 8, 0.5),
    ]
    pairs = {p["peer"]: p for p in paired_peers(rows)}
    batched = pairs[BATCHED]
    # the ratios of rounds 1 and 2 are 2.0 and 1.5: their median 1.75, not 2.5 / 1.5 (ratio of medians)
    assert batched["rounds"] == 2 and batched["ratio"] == {"median": 1.75, "range": [1.5, 2.0]}
    assert batched["captions_per_s"]["median"] == 2.5 and batched["peer_captions_per_s"]["median"] == 1.5
    assert batched["cores_used"] == 1.85 and batched["peer_cores_used"] == 2.0
    assert batched["peak_mb"] == 2050.0 and batched["p50_ms"] == 3150.0
    assert [r["round"] for r in batched["per_round"]] == [1, 2]
    assert pairs[PER_REQUEST]["rounds"] == 1 and pairs[PER_REQUEST]["ratio"]["median"] == 4.0


def test_a_client_count_without_compcap_has_no_pair() -> None:
    assert paired_peers([_row(BATCHED, 1, 4, 1.0)]) == []


def test_the_kernel_comparison_times_both_runtimes() -> None:
    """``python -m compcap_lab.steps.matmul_kernels``: every shape and row count, both runtimes timed, the
    ratio theirs."""
    import argparse

    from compcap_lab.steps.matmul_kernels import ROWS, SHAPES, measure

    rows = measure(argparse.Namespace(repeats=1, json=None))["rows"]
    assert {(r["shape"], r["rows"]) for r in rows} == {(f"{k}x{n}", m) for k, n in SHAPES for m in ROWS}
    for r in rows:
        assert r["onnxruntime_ms"] > 0 and r["torch_ms"] > 0
        assert r["onnxruntime_over_torch"] == round(r["onnxruntime_ms"] / r["torch_ms"], 3)
