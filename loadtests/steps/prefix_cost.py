"""What a key/value cache could save a whole-prefix step (``reads: prefix``: imported transformers
captioners, CompCap's Transformer and M2): the step's onnxruntime time for ``rows`` rows at every
prefix width 1..``max_length``, and the decode cost of a caption of each length with the whole prefix
re-read at every step (the sum of those times) against a cache's lower bound (every step priced as a
width-1 step: a cache never reads fewer than one token, and its attention over the cached keys is left
out, in the cache's favour). The ratio is the most a cache could speed up the step calls.

Run: ``python -m loadtests.steps.prefix_cost --repo model_repo --model NAME [--rows 128] [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from loadtests.load.results import run_and_save, script
from service import cli_blocks as blocks
from service.cli_args import positive_int
from service.engine.state_rows import state_feed
from service.manifest import load_manifest


def step_times(repo: Path, model: str, rows: int, repeats: int, threads: int = 1) -> dict[int, float]:
    """Median ms of one step call of ``rows`` rows, per prefix width 1..max_length (one image's memory,
    random tokens: the time does not depend on their values)."""
    manifest = load_manifest(repo)
    cap = manifest.captioner(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(
        str(manifest.model(cap.step).path(repo)), options, providers=["CPUExecutionProvider"]
    )
    m, d = cap.memory_dims
    rng = np.random.default_rng(0)
    vocab = manifest.model(cap.step).outputs[0].dims[-1]
    out: dict[int, float] = {}
    for width in range(1, cap.max_length + 1):
        inputs = {
            "memory": rng.standard_normal((1, m, d)).astype(np.float32),
            "image_index": np.zeros(rows, dtype=np.int64),
            "tokens": rng.integers(0, vocab, (rows, width)).astype(np.int64),
            "length": np.full(rows, width, dtype=np.int64),
            **state_feed(
                np.zeros((rows, cap.state_dim), dtype=np.float32), manifest.model(cap.step).gathers_state
            ),
        }
        session.run(None, inputs)  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.run(None, inputs)
            times.append((time.perf_counter() - t0) * 1e3)
        out[width] = float(np.median(times))
    return out


def cache_bound(times: dict[int, float]) -> dict[str, Any]:
    """Per caption length L: the whole-prefix decode (Σ_{w ≤ L} t(w)) vs a cache's bound (L · t(1))."""
    per_length = {}
    for length in times:
        prefix = sum(times[w] for w in range(1, length + 1))
        per_length[length] = {
            "prefix_ms": prefix,
            "cache_bound_ms": length * times[1],
            "max_speedup": prefix / (length * times[1]),
        }
    return {"step_ms": times, "per_length": per_length}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser)
    parser.add_argument("--model", required=True, help="a captioner that reads the whole prefix")
    parser.add_argument(
        "--rows", type=positive_int, default=128, help="rows per step call (32 requests x beam 4)"
    )
    parser.add_argument("--repeats", type=positive_int, default=20, help="step calls timed per prefix length")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    return cache_bound(step_times(Path(args.repo), args.model, args.rows, args.repeats))


def summary(figures: dict[str, Any]) -> Iterator[str]:
    """A line per prefix length: a step's time, the whole caption's by prefix and with a cache."""
    for length, row in figures["per_length"].items():
        yield (
            f"L={length:2d}  step {figures['step_ms'][length]:7.2f} ms  whole caption: prefix "
            f"{row['prefix_ms']:8.2f} ms  cache >= {row['cache_bound_ms']:8.2f} ms  "
            f"at most {row['max_speedup']:.2f}x"
        )


def prefix_cost(args: argparse.Namespace) -> int:
    return run_and_save(args, measure, summary, json_path=args.out)


main = script(__doc__.split("\n\n")[0], add_arguments, prefix_cost)

if __name__ == "__main__":
    raise SystemExit(main())
