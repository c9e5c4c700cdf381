"""Users first: caption latency with and without live shadow comparison, in one run.

``compcap-lab shadow-load --repo model_repo --clients 8 --seconds 20 --rounds 2`` starts two gateways on
free ports — A without a shadow, B with ``COMPCAP_SHADOW_MODEL`` and ``COMPCAP_SHADOW_RATE=1`` — and
alternates closed-loop phases on them (A B A B …, so drift of a shared machine hits both alike; the
idle gateway costs nothing). It prints the users' p50/p99 and captions/s per phase, the ratio of the
B and A p50 medians (the target: ≤ 1.15) and, for B, how many requests the shadow compared,
skipped as busy, or failed (from ``compcap_shadow_requests_total``), and writes JSON with ``--json``."""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from loadtests.load.http_load import Gateway, closed_loop, samples
from loadtests.load.inputs import bench_images, png_bytes
from loadtests.load.results import run_and_save, script
from service.cli import blocks
from service.cli.args import fraction
from service.compare.shadow import SHADOW_REQUESTS
from service.manifest import load_manifest

console = Console(stderr=True)


def shadow_outcomes(metrics_text: str) -> dict[str, float]:
    """The shadow's requests counter (``compcap_shadow_requests_total``) by outcome, summed over the
    other labels."""
    counts: dict[str, float] = {}
    for sample in samples(metrics_text, f"{SHADOW_REQUESTS}_total"):
        if outcome := sample.labels.get("outcome"):
            counts[outcome] = counts.get(outcome, 0.0) + sample.value
    return counts


def shadow_counts(url: str) -> dict[str, float]:
    """``shadow_outcomes`` of the gateway at ``url``."""
    return shadow_outcomes(httpx.get(f"{url}/metrics", timeout=10).text)


def run(args: argparse.Namespace) -> dict[str, Any]:
    repo = Path(args.repo)
    manifest = load_manifest(repo)
    cap = manifest.captioner(args.model or manifest.default_captioner)
    shadow = args.shadow or next(c.name for c in manifest.captioners if c.name != cap.name)
    images = bench_images(16, manifest.image.height, manifest.image.width)
    pngs = [png_bytes(x) for x in images]
    query = {"beam_size": "5", "model": cap.name}
    base = {"COMPCAP_STATE_URL": "", "COMPCAP_BACKGROUND_SHARE": str(args.background_share)}
    shadowed = {**base, "COMPCAP_SHADOW_MODEL": shadow, "COMPCAP_SHADOW_RATE": str(args.rate)}
    phases: list[dict[str, Any]] = []
    with Gateway(repo, base) as plain, Gateway(repo, shadowed) as with_shadow:
        for gateway in (plain, with_shadow):  # warm-up
            asyncio.run(closed_loop(gateway.url, pngs, query, args.clients, 3.0, cap.step))
        for n in range(2 * args.rounds):
            b = n % 2 == 1
            gateway = with_shadow if b else plain
            before = shadow_counts(gateway.url) if b else {}
            users = asyncio.run(closed_loop(gateway.url, pngs, query, args.clients, args.seconds, cap.step))
            phase: dict[str, Any] = {"shadow": b, **users}
            if b:
                after = shadow_counts(gateway.url)
                phase["shadow_outcomes"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            phases.append(phase)
            console.print(
                f"phase {n + 1}: {'with shadow' if b else 'no shadow'}: p50 {users['p50_ms']} ms, "
                f"{users['captions_per_s']} captions/s {phase.get('shadow_outcomes', '')}"
            )
    a = [p["p50_ms"] for p in phases if not p["shadow"]]
    b_ = [p["p50_ms"] for p in phases if p["shadow"]]
    outcomes: dict[str, float] = {}
    for p in phases:
        for k, v in p.get("shadow_outcomes", {}).items():
            outcomes[k] = outcomes.get(k, 0.0) + v
    return {
        "repo": str(repo),
        "captioner": cap.name,
        "shadow": shadow,
        "rate": args.rate,
        "clients": args.clients,
        "seconds": args.seconds,
        "background_share": args.background_share,
        "phases": phases,
        "p50_no_shadow_ms": statistics.median(a),
        "p50_with_shadow_ms": statistics.median(b_),
        "p50_ratio": round(statistics.median(b_) / statistics.median(a), 3),
        "shadow_outcomes": outcomes,
    }


def summary(result: dict[str, Any]) -> Table:
    table = Table(
        title=f"{result['clients']} caption clients ({result['captioner']}), without (A) and with (B) a "
        f"shadow ({result['shadow']}, rate {result['rate']}, background share {result['background_share']})"
    )
    for column in ("phase", "p50 ms", "p99 ms", "captions/s", "shadow compared / busy / failed"):
        table.add_column(column)
    for n, p in enumerate(result["phases"], 1):
        o = p.get("shadow_outcomes")
        shadow = (
            "-"
            if o is None
            else f"{o.get('compared', 0):.0f} / {o.get('busy', 0):.0f} / {o.get('failed', 0):.0f}"
        )
        table.add_row(
            f"{n} {'B' if p['shadow'] else 'A'}",
            str(p["p50_ms"]),
            str(p["p99_ms"]),
            str(p["captions_per_s"]),
            shadow,
        )
    table.caption = f"p50 B/A = {result['p50_ratio']} (target <= 1.15)"
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    blocks.repository(parser)
    blocks.captioner(parser, who="users' captioner")
    parser.add_argument("--shadow", default=None, help="shadow configuration (default: another captioner)")
    parser.add_argument("--rate", type=fraction, default=1.0, help="COMPCAP_SHADOW_RATE")
    blocks.ab_phases(parser)
    parser.add_argument("--background-share", type=fraction, default=0.25, help="COMPCAP_BACKGROUND_SHARE")
    blocks.json_output(parser)


def shadow_load(args: argparse.Namespace) -> int:
    return run_and_save(args, run, summary)


main = script(__doc__, add_arguments, shadow_load)


__all__ = ["add_arguments", "main", "shadow_counts", "shadow_load", "shadow_outcomes"]
