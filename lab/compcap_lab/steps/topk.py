"""What one beam-search step costs on the host for a vocabulary of real size, whole rows against each
row's best words (``service.engine.sparse``): ``python -m compcap_lab.steps.topk [--vocab 50257]``.

A ``BeamBatch`` of requests of beam 5 (as many as fill the rows) consumes a step's log-probabilities
[N, V] — whole, as the step returns them without a ``top_k`` — or as ``RowTopK`` taken on the host
(``row_top_k``, what the runner does for a step graph without top-k outputs) and as ``RowTopK`` alone
(what a step graph with top-k outputs hands over: the host part left when the device takes the top k).
Prints ms per step (median of ``--repeats``) and the bytes a step output moves off the device."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np

from service.engine.beam_batch import BeamBatch, Joining
from service.engine.params import SearchParams
from service.engine.sparse import row_top_k, top_k_for

BOS, EOS, BANNED = 1, 2, (0, 1, 3)
BEAM = 5


def batch_of(rows: int, state: int) -> BeamBatch:
    batch = BeamBatch(BEAM, 16, BOS, EOS, BANNED)
    images = max(1, rows // BEAM)
    joins = [
        Joining(
            k,
            np.zeros((1, 4, 8), np.float32),
            np.zeros((1, state), np.float32),
            SearchParams("m", beam_size=BEAM),
        )
        for k in range(images)
    ]
    batch.add_many(joins)
    return batch


def time_step(rows: int, vocab: int, mode: str, repeats: int, state: int = 768) -> float:
    """Median ms of the host's part of one step at ``rows`` live rows (after the first, which has one row
    per image) in ``mode``: whole, host-top-k, top-k (the output already reduced)."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        batch = batch_of(rows, state)
        r = batch.rows()
        batch.advance(
            r, _logprobs(rng, r.rows.shape[0], vocab), r.state.host()
        )  # grow to BEAM rows per image
        r = batch.rows()
        logprobs = _logprobs(rng, r.rows.shape[0], vocab)
        k = top_k_for(batch.capacity, len(BANNED))
        pre = row_top_k(logprobs, k, EOS) if mode == "top-k" else None
        start = time.perf_counter()
        if mode == "whole":
            batch.advance(r, logprobs, r.state.host())
        elif mode == "host-top-k":
            batch.advance(r, row_top_k(logprobs, k, EOS), r.state.host())
        else:
            assert pre is not None
            batch.advance(r, pre, r.state.host())
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def _logprobs(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    logits = rng.standard_normal((n, vocab), dtype=np.float32) * 3
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--rows", type=int, nargs="+", default=[16, 160, 640])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    out = []
    print(f"V = {args.vocab}, beam {BEAM}: host ms per step (median of {args.repeats})")
    print(f"{'rows':>6} {'whole':>9} {'host top-k':>11} {'top-k':>8} {'MB whole':>9} {'KB top-k':>9}")
    for rows in args.rows:
        figures = {m: time_step(rows, args.vocab, m, args.repeats) for m in ("whole", "host-top-k", "top-k")}
        k = top_k_for(BEAM, len(BANNED))
        mb_whole = rows * args.vocab * 4 / 1e6
        kb_top = rows * (k * 12 + 4) / 1e3
        print(
            f"{rows:>6} {figures['whole']:>9.2f} {figures['host-top-k']:>11.2f} {figures['top-k']:>8.2f} "
            f"{mb_whole:>9.1f} {kb_top:>9.1f}"
        )
        out.append(
            {
                "rows": rows,
                **{f"{m}_ms": v for m, v in figures.items()},
                "mb_whole": mb_whole,
                "kb_top_k": kb_top,
            }
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"vocab": args.vocab, "beam": BEAM, "steps": out}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
