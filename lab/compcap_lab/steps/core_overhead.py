"""What the engine core's process boundary costs a caption, without HTTP: the same captions asked of
the engine in this process and of an engine core in another (``python -m service.engine.core``, the
``--api-processes`` split's core) through ``RemoteEngine``, ``--clients`` callers each sending its next
image when the last is answered. Prints, per setup and client count, the latency (p50, p90) and the CPU
per caption of every process involved (this one, plus the core's), and the differences: the split's
own cost (messages, copies, the socket, a second event loop), separated from the HTTP processes and
the load generator that ``compcap bench --api-processes`` also counts.

``python -m compcap_lab.steps.core_overhead --repo model_repo --backend null --clients 1 8 --captions 400``
(``--backend onnxruntime``: the real models on the CPU; the core and this process then also share the
CPU with the models' threads)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from service.cli.args import positive_int
from service.engine.client import EngineClient
from service.engine.core_client import RemoteEngine
from service.engine.engine import CaptionEngine
from service.manifest import load_manifest
from service.metrics import Metrics
from service.settings import Settings, load_settings
from service.text.vocabulary import Vocabulary

TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of the line)


async def load(
    engine: EngineClient, images: np.ndarray, clients: int, captions: int, pids: Sequence[int]
) -> dict[str, Any]:
    """``captions`` single-image captions from ``clients`` closed-loop callers: latency and CPU/caption."""
    params = engine.resolve()
    latencies: list[float] = []
    sent = iter(range(captions))

    async def caller() -> None:
        for i in sent:
            start = time.perf_counter()
            await engine.caption(images[i % len(images)][None], params)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(caller() for _ in range(min(clients, 4))))  # warm-up: first calls, thread pools
    latencies.clear()
    sent = iter(range(captions))
    cpu = [process_cpu_s(pid) for pid in pids]
    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(clients)))
    wall = time.perf_counter() - start
    used = [process_cpu_s(pid) - before for pid, before in zip(pids, cpu, strict=True)]
    ms = np.asarray(latencies) * 1e3
    return {
        "clients": clients,
        "captions": len(latencies),
        "captions_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p90_ms": round(float(np.percentile(ms, 90)), 3),
        "cpu_ms_per_caption": round(sum(used) * 1e3 / len(latencies), 3),
        "cpu_ms_per_caption_by_process": [round(u * 1e3 / len(latencies), 3) for u in used],
    }


async def in_process(
    settings: Settings, images: np.ndarray, args: argparse.Namespace
) -> list[dict[str, Any]]:
    engine = await CaptionEngine.from_settings(settings, Metrics())
    try:
        return [await load(engine, images, c, args.captions, [os.getpid()]) for c in args.clients]
    finally:
        await engine.close()


async def through_a_core(
    settings: Settings, images: np.ndarray, args: argparse.Namespace
) -> list[dict[str, Any]]:
    manifest = load_manifest(settings.repo)
    vocab = Vocabulary.load(settings.repo / manifest.vocabulary.file)
    with tempfile.TemporaryDirectory(prefix="compcap-overhead-") as folder:
        path = Path(folder) / "engine.sock"
        env = {**os.environ, "COMPCAP_ENGINE_SOCKET": str(path), "COMPCAP_REPO": str(settings.repo)}
        env["COMPCAP_BACKEND"] = settings.backend
        cpus = args.core_cpus

        def pin() -> None:  # in the child, before it starts: the core on its own CPUs
            if cpus:
                os.sched_setaffinity(0, cpus)

        core = subprocess.Popen([sys.executable, "-m", "service.engine.core"], env=env, preexec_fn=pin)
        remote = RemoteEngine(path, manifest, vocab, settings)
        remote.start()
        try:
            if not await remote.wait_connected(120):
                raise RuntimeError("the engine core did not answer within 120 s")
            pids = [os.getpid(), core.pid]
            return [await load(remote, images, c, args.captions, pids) for c in args.clients]
        finally:
            await remote.close()
            core.terminate()
            core.wait(30)


def uvloop_run() -> Any:
    import uvloop

    return uvloop.run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, default=Path("model_repo"), help="the model repository")
    parser.add_argument(
        "--backend", choices=("null", "onnxruntime"), default="null", help="null: outputs at zero cost"
    )
    parser.add_argument("--clients", type=positive_int, nargs="+", default=[1, 8], help="closed-loop callers")
    parser.add_argument("--captions", type=positive_int, default=400, help="captions per measurement")
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="this process's event loop (uvloop: as the gateway's uvicorn and the engine core run)",
    )
    parser.add_argument(
        "--core-cpus",
        type=int,
        nargs="+",
        default=None,
        help="run the engine core on these CPUs only (e.g. this process under taskset -c 0, the core on 1: "
        "neither evicts the other's caches)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    settings = load_settings(repo=args.repo, backend=args.backend, intra_op_threads=1)
    manifest = load_manifest(settings.repo)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (16, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)
    run = asyncio.run if args.loop == "asyncio" else uvloop_run()
    here = run(in_process(settings, images, args))
    there = run(through_a_core(settings, images, args))
    rows = []
    beam = settings.default_beam_size
    print(f"backend {args.backend}, {os.cpu_count()} CPUs: one image per caption, beam {beam}")
    header = f"{'setup':<14} {'captions/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'CPU ms/caption':>15}"
    print(f"{'clients':>7} {header}")
    for a, b in zip(here, there, strict=True):
        for name, row in (("in process", a), ("engine core", b)):
            print(
                f"{row['clients']:>7} {name:<14} {row['captions_per_s']:>10} {row['p50_ms']:>8} "
                f"{row['p90_ms']:>8} {row['cpu_ms_per_caption']:>15}"
            )
        extra = {
            "clients": a["clients"],
            "p50_ms_added": round(b["p50_ms"] - a["p50_ms"], 3),
            "cpu_ms_per_caption_added": round(b["cpu_ms_per_caption"] - a["cpu_ms_per_caption"], 3),
        }
        rows.append({"in_process": a, "engine_core": b, **extra})
        print(
            f"{'':>7} {'the boundary':<14} {'':>10} {extra['p50_ms_added']:>+8} {'':>8} "
            f"{extra['cpu_ms_per_caption_added']:>+15}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"backend": args.backend, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
