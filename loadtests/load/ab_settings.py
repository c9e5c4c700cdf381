"""A/B of gateway settings under the same closed-loop load: each variant gets its own gateway
(``compcap serve`` with the variant's ``COMPCAP_*`` environment), variants interleaved round by round
so a shared machine's drift hits them alike. Prints, per round and variant, captions/s, p50, rows per
step call and the gateway's CPU ms per caption; writes the runs and each variant's median as JSON.

    python -m loadtests.load.ab_settings '{"base": {}, "t1": {"COMPCAP_INTRA_OP_THREADS": "1"}}' \
        --clients 32 --duration 20 --rounds 3 --json reports/perf/ab.json

A variant's ``"@cwd"`` (not an environment variable) starts its gateway in that folder, so it runs that
checkout's code: ``git worktree add /tmp/base <commit>`` and ``{"base": {"@cwd": "/tmp/base"}, "new":
{}}`` measure a change against the commit before it (``--repo`` must then be an absolute path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from loadtests.load.http_load import Gateway, closed_loop
from loadtests.load.inputs import bench_images, png_bytes
from loadtests.load.results import run_and_save, script
from service.cli import blocks
from service.cli.args import positive_float, positive_int
from service.manifest import load_manifest

CWD = "@cwd"  # a variant's key that is not environment: the folder its gateway starts in


def parse_variants(text: str) -> dict[str, dict[str, str]]:
    """``{"name": {"ENV": "value"}}`` from JSON; every value a string (they become environment)."""
    variants = json.loads(text)
    if not isinstance(variants, dict) or not variants:
        raise ValueError("variants: a non-empty JSON object {name: {ENV: value}}")
    for name, env in variants.items():
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"variants[{name!r}]: an object of string environment values")
    return variants


def medians(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """A variant's medians over its rounds: captions/s, step ms under load, the gateway's CPU ms per
    caption (whole process and event-loop thread)."""

    def med(pick: Any) -> float:
        values = [v for v in (pick(r) for r in rows) if v is not None]
        return round(statistics.median(values), 3) if values else float("nan")

    return {
        "median_captions_per_s": med(lambda r: r["captions_per_s"]),
        "median_step_ms_under_load": med(lambda r: r.get("step_ms_under_load")),
        "median_server_cpu_ms": med(lambda r: (r.get("cpu_ms_per_caption") or {}).get("server")),
        "median_main_thread_cpu_ms": med(
            lambda r: (r.get("cpu_ms_per_caption") or {}).get("server_main_thread")
        ),
    }


def run(
    repo: Path, variants: dict[str, dict[str, str]], clients: int, duration: float, rounds: int
) -> dict[str, Any]:
    manifest = load_manifest(repo)
    cap = manifest.captioner(manifest.default_captioner)
    pngs = [png_bytes(x) for x in bench_images(64, manifest.image.height, manifest.image.width)]
    query = {"model": cap.name, "beam_size": "5"}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, variant in variants.items():
            env = {k: v for k, v in variant.items() if k != CWD}
            with Gateway(repo, {"COMPCAP_MAX_QUEUE": "512", **env}, cwd=variant.get(CWD)) as gateway:
                asyncio.run(closed_loop(gateway.url, pngs, query, clients, 3.0, cap.step))  # warm-up
                row = asyncio.run(
                    closed_loop(gateway.url, pngs, query, clients, duration, cap.step, gateway.process.pid)
                )
            runs[name].append(row)
            print(
                f"round {r} {name}: {row['captions_per_s']:.1f} captions/s, p50 {row['p50_ms']:.0f} ms,"
                f" {row['mean_rows_per_call']:.0f} rows/call, step {row.get('step_ms_under_load')} ms,"
                f" CPU {row.get('cpu_ms_per_caption')}",
                flush=True,
            )
    summary = {name: {**medians(rows), "runs": rows} for name, rows in runs.items()}
    return {"clients": clients, "duration": duration, "variants": variants, "summary": summary}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("variants", help='JSON {"name": {"COMPCAP_X": "value"}}')
    blocks.repository(parser)
    parser.add_argument("--clients", type=positive_int, default=32, help="closed-loop caption clients")
    parser.add_argument("--duration", type=positive_float, default=20.0, help="seconds per variant and round")
    parser.add_argument("--rounds", type=positive_int, default=3, help="rounds, the variants interleaved")
    blocks.json_output(parser)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    return run(Path(args.repo), parse_variants(args.variants), args.clients, args.duration, args.rounds)


def summary(result: dict[str, Any]) -> Iterator[str]:
    """A line per variant: its medians over the rounds."""
    for name, v in result["summary"].items():
        yield (
            f"{name}: median {v['median_captions_per_s']:.1f} captions/s,"
            f" step {v['median_step_ms_under_load']} ms, server CPU {v['median_server_cpu_ms']} ms/caption"
            f" (loop {v['median_main_thread_cpu_ms']})"
        )


def ab_settings(args: argparse.Namespace) -> int:
    return run_and_save(args, measure, summary)


main = script(__doc__, add_arguments, ab_settings, prog="python -m loadtests.load.ab_settings")

if __name__ == "__main__":
    raise SystemExit(main())
