"""Plot ``compcap bench`` JSON files: captions/s and p50 latency against clients, with each backend's
step-throughput limit (ideal captions/s) and naive per-request decoding as reference lines.
``python -m loadtests.bench.plot reports/bench_onnxruntime.json reports/bench_triton.json``"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from loadtests.bench.ceiling import ceiling_of_limit


def plot(results: list[dict], out: Path) -> None:
    fig, (throughput, latency) = plt.subplots(1, 2, figsize=(11, 4.2))
    for color, result in zip(("tab:blue", "tab:orange", "tab:green"), results, strict=False):
        name = result["backend"]
        clients = [row["clients"] for row in result["load"]]
        throughput.plot(
            clients,
            [row["captions_per_s"] for row in result["load"]],
            "o-",
            color=color,
            label=f"{name}: gateway",
        )
        throughput.axhline(
            result["limit"]["ideal_captions_per_s"], color=color, ls="--", lw=1, label=f"{name}: step limit"
        )
        throughput.axhline(
            result["naive"]["captions_per_s"], color=color, ls=":", lw=1, label=f"{name}: naive"
        )
        limit = result["limit"]["ideal_captions_per_s"]
        throughput.plot(
            clients,
            [limit * ceiling_of_limit(result, row["mean_rows_per_call"]) for row in result["load"]],
            "^-.",
            color=color,
            lw=1,
            alpha=0.7,
            label=f"{name}: zero-overhead ceiling",
        )
        latency.plot(
            clients, [row["p50_ms"] for row in result["load"]], "o-", color=color, label=f"{name}: p50"
        )
        latency.plot(
            clients,
            [row["p99_ms"] for row in result["load"]],
            "s--",
            color=color,
            alpha=0.6,
            label=f"{name}: p99",
        )
        latency.axhline(result["single_decode_ms"], color=color, ls=":", lw=1, label=f"{name}: single decode")
    for ax in (throughput, latency):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("closed-loop HTTP clients")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    throughput.set_yscale("log")
    throughput.set_ylabel("captions / s (beam 5)")
    latency.set_yscale("log")
    latency.set_ylabel("latency, ms")
    fig.suptitle(
        f"compcap bench — {results[0]['model']}, beam {results[0]['beam_size']}, "
        f"{results[0]['cpu_count']} CPUs"
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json", nargs="+")
    parser.add_argument("--out", default="reports/bench.png")
    args = parser.parse_args(argv)
    plot([json.loads(Path(p).read_text()) for p in args.json], Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
