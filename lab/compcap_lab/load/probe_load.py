"""Users first: caption latency with and without a live probe running, in one run.

``compcap-lab probe-load --repo model_repo --clients 8 --seconds 20 --rounds 2`` starts ``compcap serve``
on a free port, then alternates phases A (``clients`` closed-loop caption clients alone) and B (the
same clients while a systematicity probe job runs), ``rounds`` times each (A B A B …, so that drift
of a shared machine hits both alike). It prints the users' p50/p99 and captions/s per phase, the
ratio of the B and A p50 medians (the target: ≤ 1.25), and the probe's images/s during B
(from the job's progress), and writes them as JSON with ``--json``."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from compcap_client import CompCapClient
from loadtests.load.http_load import Gateway, closed_loop
from loadtests.load.inputs import bench_images, png_bytes
from loadtests.load.results import run_and_save, script
from service.cli import blocks
from service.cli.args import fraction, non_negative_float, positive_int, rerank
from service.manifest import load_manifest

console = Console(stderr=True)


def _done(client: CompCapClient, job: str) -> tuple[int, str]:
    state = client.probe(job)
    return state.done, state.status


def run(args: argparse.Namespace) -> dict[str, Any]:
    repo = Path(args.repo)
    manifest = load_manifest(repo)
    cap = manifest.captioner(args.model or manifest.default_captioner)
    images = bench_images(16, manifest.image.height, manifest.image.width)
    pngs = [png_bytes(x) for x in images]
    query = {"beam_size": "5", "model": cap.name}
    probe = {"kind": "systematicity", "model": cap.name, "beam_size": args.probe_beam, "n_best": 5}
    probe["rerank"] = args.probe_rerank  # a name, False (none) or None (the captioner's own)
    env = {
        "COMPCAP_STATE_URL": "",
        "COMPCAP_MAX_BACKGROUND_ROWS": str(args.background_rows),
        "COMPCAP_BACKGROUND_SHARE": str(args.background_share),
    }
    phases: list[dict[str, Any]] = []
    with Gateway(repo, env) as gateway, CompCapClient(gateway.url, timeout=30.0) as client:
        asyncio.run(closed_loop(gateway.url, pngs, query, args.clients, 3.0, cap.step))  # warm-up
        job: str | None = None
        for n in range(2 * args.rounds):
            with_probe = n % 2 == 1
            before = 0
            if with_probe:
                job = client.start_probe(**probe).id
                time.sleep(args.settle)  # the probe's first requests are admitted and decoding
                before, _ = _done(client, job)
            start = time.perf_counter()
            users = asyncio.run(closed_loop(gateway.url, pngs, query, args.clients, args.seconds, cap.step))
            elapsed = time.perf_counter() - start
            phase: dict[str, Any] = {"probe": with_probe, **users}
            if with_probe and job is not None:
                after, status = _done(client, job)
                phase["probe_images_per_s"] = round((after - before) / elapsed, 2)
                phase["probe_status"] = status
                client.cancel_probe(job)
            phases.append(phase)
            label = "with probe" if with_probe else "users alone"
            console.print(
                f"phase {n + 1}: {label}: p50 {users['p50_ms']} ms, {users['captions_per_s']} captions/s"
            )
    a = [p["p50_ms"] for p in phases if not p["probe"]]
    b = [p["p50_ms"] for p in phases if p["probe"]]
    return {
        "repo": str(repo),
        "captioner": cap.name,
        "clients": args.clients,
        "seconds": args.seconds,
        "probe": probe,
        "max_background_rows": args.background_rows,
        "background_share": args.background_share,
        "phases": phases,
        "p50_alone_ms": statistics.median(a),
        "p50_with_probe_ms": statistics.median(b),
        "p50_ratio": round(statistics.median(b) / statistics.median(a), 3),
        "probe_images_per_s": statistics.median(p["probe_images_per_s"] for p in phases if p["probe"]),
    }


def summary(result: dict[str, Any]) -> Table:
    probe = result["probe"]
    table = Table(
        title=f"{result['clients']} caption clients, alone (A) and with a systematicity probe (B: beam "
        f"{probe['beam_size']}, rerank {probe['rerank']}; background rows {result['max_background_rows']}, "
        f"share {result['background_share']})"
    )
    for column in ("phase", "p50 ms", "p99 ms", "captions/s", "probe images/s"):
        table.add_column(column)
    for n, p in enumerate(result["phases"], 1):
        table.add_row(
            f"{n} {'B' if p['probe'] else 'A'}",
            str(p["p50_ms"]),
            str(p["p99_ms"]),
            str(p["captions_per_s"]),
            str(p.get("probe_images_per_s", "-")),
        )
    table.caption = (
        f"p50 B/A = {result['p50_ratio']} (target <= 1.25); probe {result['probe_images_per_s']} images/s"
    )
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser)
    blocks.captioner(parser)
    blocks.ab_phases(parser)
    parser.add_argument(
        "--settle",
        type=non_negative_float,
        default=2.0,
        help="seconds between starting the probe and measuring",
    )
    parser.add_argument("--probe-beam", type=positive_int, default=100, help="the probe's beam size")
    parser.add_argument(
        "--probe-rerank",
        type=rerank,
        default="butr",
        help="the probe's ranker, or 'none' for plain beam search",
    )
    parser.add_argument(
        "--background-rows", type=positive_int, default=128, help="COMPCAP_MAX_BACKGROUND_ROWS"
    )
    parser.add_argument("--background-share", type=fraction, default=0.25, help="COMPCAP_BACKGROUND_SHARE")
    blocks.json_output(parser)


def probe_load(args: argparse.Namespace) -> int:
    return run_and_save(args, run, summary)


main = script(__doc__, add_arguments, probe_load)


if __name__ == "__main__":
    raise SystemExit(main())
