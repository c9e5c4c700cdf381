"""``compcap bench --profile DIR``: where the gateway's time goes at ``--profile-clients`` clients.

Starts ``compcap serve`` on a free port, loads it with the bench's closed-loop beam-5 clients and, for
the middle ``--seconds`` s of that load, samples every Python thread of the gateway with py-spy (two
samplers at once, neither pausing the process: one writes the flame graph ``DIR/flame.svg``, the
other the collapsed stacks ``DIR/stacks.txt``). Each sampled stack is put in one category: that of
the frame nearest the leaf that carries one of ``CATEGORIES``' markers (numpy called by the beam
batch is beam bookkeeping; PIL called by the image decoder is image decoding), else "other Python".
``DIR/breakdown.json`` holds the samples per category and thread, and the event-loop thread's idle
share (the samples it did not spend running, of all it could have). onnxruntime's own compute
threads have no Python frames and are not sampled: model time is seen as the Python threads waiting
in ``InferenceSession.run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from loadtests.load.http_load import Gateway, closed_loop
from loadtests.load.inputs import bench_images, png_bytes
from loadtests.load.results import print_and_save
from service.cli.args import positive_int, writable_dir
from service.manifest import load_manifest

RATE_HZ = 100
# category → markers (substrings of a frame "function (file:line)"); in a frame, the first match wins
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model calls", ("onnxruntime", "tritonclient", "backends/")),
    ("image decoding", ("service/images/decode.py", "PIL/")),
    ("beam bookkeeping", ("engine/beam_batch.py", "engine/beam.py", "engine/processors.py")),
    ("scheduling", ("engine/scheduler.py", "engine/runner.py", "engine/engine.py", "engine/request.py")),
    ("response shaping", ("gateway/shape.py", "pydantic", "json/", "jsonable_encoder", "fastapi/encoders")),
    (
        "HTTP and parsing",
        (
            *("uvicorn/protocols", "uvicorn/middleware", "starlette", "fastapi", "h11", "httptools"),
            *("multipart", "gateway/routes.py", "api/parsing.py", "api/handlers.py", "api/errors.py"),
            *("api/limits.py", "api/requestlog.py", "api/auth.py", "api/deps.py", "api/disconnect.py"),
            "gateway/app.py",
        ),
    ),
)
IDLE_WORKER = "_worker (concurrent/futures/thread.py"  # an executor thread waiting for work
IDLE = "idle executor threads"
EVENT_LOOP = "event loop (uvloop: callbacks, sockets, waiting)"
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_THREAD = re.compile(r"^thread \(\d+\): (?P<name>.*)$")


def categorise(stack: Sequence[str]) -> str:
    """The category of one sampled stack (root first): that of the frame nearest the leaf with a marker;
    else an executor thread waiting for work, or the event loop itself (its C code has no frames)."""
    for frame in reversed(stack):
        for name, markers in CATEGORIES:
            if any(marker in frame for marker in markers):
                return name
    if stack and IDLE_WORKER in stack[-1]:
        return IDLE
    if any("asyncio/" in frame for frame in stack):
        return EVENT_LOOP
    return "other Python"


def breakdown(collapsed: str, seconds: float, rate_hz: float = RATE_HZ) -> dict[str, Any]:
    """Samples per category (overall, without idle executor threads, and per thread kind) of py-spy's
    collapsed ``--threads`` output, and the main (event-loop) thread's idle share over ``seconds`` of
    sampling at ``rate_hz``."""
    per_category: Counter[str] = Counter()
    per_thread: dict[str, Counter[str]] = {}
    for line in collapsed.splitlines():
        match = _LINE.match(line.strip())
        if not match:
            continue
        frames = match["stack"].split(";")
        head = _THREAD.match(frames[0])
        thread = re.sub(r"[_ ]?\d+.*$", "", head["name"]) if head else "?"
        category = categorise(frames[1:] if head else frames)
        count = int(match["count"])
        per_category[category] += count
        per_thread.setdefault(thread or "?", Counter())[category] += count
    idle_workers = per_category.pop(IDLE, 0)
    total = sum(per_category.values())
    main = sum(per_thread.get("MainThread", Counter()).values())
    possible = seconds * rate_hz
    return {
        "seconds": seconds,
        "rate_hz": rate_hz,
        "samples": total,
        "share": {k: round(v / total, 4) for k, v in per_category.most_common()} if total else {},
        "idle_executor_samples": idle_workers,  # not in ``samples`` or ``share``
        "per_thread": {t: dict(c.most_common()) for t, c in per_thread.items()},
        "event_loop_busy": round(min(main / possible, 1.0), 4) if possible else None,
        "event_loop_idle": round(max(1.0 - main / possible, 0.0), 4) if possible else None,
    }


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed (make install puts it in .venv)")
    return found


def _sample(pid: int, seconds: float, out: Path) -> None:
    common = ["--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(RATE_HZ), "--threads"]
    common += ["--nonblocking"]
    spy = _py_spy()
    samplers = [
        subprocess.Popen([spy, "record", *common, "--format", "flamegraph", "-o", str(out / "flame.svg")]),
        subprocess.Popen([spy, "record", *common, "--format", "raw", "-o", str(out / "stacks.txt")]),
    ]
    for sampler in samplers:
        if sampler.wait() != 0:
            raise RuntimeError(f"py-spy exited with {sampler.returncode}")


async def _load_and_sample(
    url: str,
    pid: int,
    pngs: list[bytes],
    query: dict[str, str],
    args: argparse.Namespace,
    step: str,
    out: Path,
) -> dict[str, Any]:
    warm = 3.0
    load = asyncio.create_task(
        closed_loop(url, pngs, query, args.profile_clients, args.duration + 2 * warm, step)
    )
    await asyncio.sleep(warm)
    await asyncio.to_thread(_sample, pid, args.duration, out)
    return await load


def run(args: argparse.Namespace) -> dict[str, Any]:
    repo = Path(args.repo)
    manifest = load_manifest(repo)
    cap = manifest.captioner(args.model or manifest.default_captioner)
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    pngs = [png_bytes(x) for x in bench_images(args.images, manifest.image.height, manifest.image.width)]
    query = {"model": cap.name, "beam_size": "5"}
    env = {"COMPCAP_BACKEND": args.backend, "COMPCAP_MAX_QUEUE": "1024", "COMPCAP_STATE_URL": ""}
    if args.triton_url:
        env["COMPCAP_TRITON_URL"] = args.triton_url
    with Gateway(repo, env) as gateway:
        load = asyncio.run(
            _load_and_sample(gateway.url, gateway.process.pid, pngs, query, args, cap.step, out)
        )
    result = {
        "backend": args.backend,
        "model": cap.name,
        "clients": args.profile_clients,
        "load": load,
        "breakdown": breakdown((out / "stacks.txt").read_text(), args.duration),
        "flame_graph": str(out / "flame.svg"),
    }
    (out / "breakdown.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def profile_table(result: dict[str, Any]) -> Table:
    b = result["breakdown"]
    table = Table(title=f"where the gateway's time goes — {result['clients']} clients, {result['model']}")
    table.add_column("category")
    table.add_column("share of sampled Python time", justify="right")
    for name, share in b["share"].items():
        table.add_row(name, f"{100 * share:.1f}%")
    table.caption = (
        f"{b['samples']} samples at {b['rate_hz']} Hz over {b['seconds']} s; event loop idle "
        f"{100 * (b['event_loop_idle'] or 0):.0f}%; {result['load']['captions_per_s']} captions/s during the "
        f"run; flame graph {result['flame_graph']}"
    )
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        type=writable_dir,
        default=None,
        help="profile the gateway; write the flame graph and breakdown into this folder",
    )
    parser.add_argument(
        "--profile-clients", type=positive_int, default=32, help="closed-loop clients while profiling"
    )


def profile(args: argparse.Namespace) -> int:
    result = run(args)
    return print_and_save(result, profile_table(result), args.json)
