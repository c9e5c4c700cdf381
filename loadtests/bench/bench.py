"""``compcap bench``: decoder-step throughput limit, naive per-request decoding, and the gateway under
closed-loop HTTP load, measured in one run on one backend.

(a) limit: ``<cap>_step`` alone on realistic inputs (memory of real encoded images, prefixes, state)
    at batch sizes 5..max_rows; rows/s at the best size, divided by the rows one beam-5 caption needs
    (measured on the bench images) = ideal captions/s.
(b) naive: the in-process engine with cross-request batching off (the same scheduler, one per
    request), ``--naive-clients`` concurrent callers (each request's step calls carry only its rows).
(c) load: ``compcap serve`` started on a free port (cross-request batching on), ``clients`` closed-loop
    HTTP clients for ``--seconds`` s each; mean rows per decoder call from the gateway's /metrics.

Every figure comes from the same images, model and beam size (5), so the ratios are comparable.

``--backend null`` (``service.backends.null``: no models, outputs at zero cost) measures the gateway's
own ceiling, the captions/s CompCap could serve on an infinitely fast device: (a) and the models'
compute limit are skipped (a zero-cost step has no limit), (b) and (c) run as above, and each load
level reports the gateway's CPU ms per caption and captions/s per core it kept busy. ``--gateways``
loads that many independent gateway processes at once (clients spread over them), per count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from rich.console import Console
from rich.table import Table

from loadtests.bench.ceiling import ceiling_of_limit, step_ms_alone
from loadtests.bench.paired import paired_split, paired_table
from loadtests.bench.table import summary
from loadtests.load.cpu import bounds_of_limit, process_tree
from loadtests.load.http_load import Gateway, closed_loop
from loadtests.load.inputs import bench_images, png_bytes
from service.backends.registry import make_backend
from service.cli import blocks
from service.cli.args import (
    add_renamed,
    non_negative_int,
    positive_float,
    positive_int,
)
from service.engine.engine import CaptionEngine
from service.engine.params import SearchParams
from service.engine.runner import ModelRunner, StepInput
from service.manifest import PRECISIONS, Manifest, Precision, load_manifest
from service.metrics import Metrics
from service.settings import Settings

BEAM_SIZE = 5
LIMIT_KEYS = ("best_batch_rows", "rows_per_s", "ideal_captions_per_s")
NULL_SKIPPED = (
    "backend null: a step and every model call cost nothing, so the step limit and the models' compute "
    "limit are infinite (not measured)"
)
BATCH_ROWS = (5, 10, 20, 40, 80, 160, 320, 640)
console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)


# -- inputs ---------------------------------------------------------------------------------------


def step_totals(metrics: Metrics, step_model: str) -> tuple[float, float]:
    """(rows, step calls) the engine has sent to ``step_model`` so far (its own Prometheus histogram)."""
    rows = calls = 0.0
    for family in metrics.beam_rows.collect():
        for sample in family.samples:
            if sample.labels.get("model") != step_model:
                continue
            if sample.name.endswith("_sum"):
                rows = sample.value
            elif sample.name.endswith("_count"):
                calls = sample.value
    return rows, calls


# -- (single decode, limit, naive): in process ----------------------------------------------------


@dataclass
class InProcess:
    single_decode_ms: float
    rows_per_caption: float
    steps_per_caption: float
    limit: dict[str, Any]  # its keys None, and "skipped" why, for the null backend
    batch_curve: list[dict[str, float]]
    naive_captions_per_s: float
    compute_limit: dict[str, Any]


async def in_process(
    settings: Settings,
    manifest: Manifest,
    params_kw: dict[str, Any],
    images: np.ndarray,
    args: argparse.Namespace,
) -> InProcess:
    metrics = Metrics()
    alone = settings.model_copy(update={"cross_request_batching": False})
    engine = await CaptionEngine.from_settings(alone, metrics)
    params = engine.resolve(**params_kw)
    try:
        single, rows, steps = await _single_decodes(engine, metrics, params, images, args.single_runs)
        if settings.backend == "null":  # zero-cost models: no step limit, no compute limit to measure
            naive = await _naive(engine, params, images, args.naive_clients, args.duration)
            skipped = {"skipped": NULL_SKIPPED, **dict.fromkeys(LIMIT_KEYS)}
            return InProcess(single, rows, steps, skipped, [], naive, {"skipped": NULL_SKIPPED})
        curve = await _step_curve(engine.runner, manifest, params, images, args.max_rows, args.curve_seconds)
        if settings.backend == "onnxruntime":
            from service.backends.onnxruntime.backend import usable_cores

            # the limit: the best of both thread-pool modes; the least CPU per row (cpu.py's bounds):
            # the least of those and of the other thread count (one, or every core when one is the
            # gateway's): a step alone may gain from threads the loaded gateway cannot give it
            step = manifest.captioner(params.model).step
            threads = step_threads(engine.runner.backend, step)
            for point in curve:
                point["ort_spinning"] = float(settings.ort_spinning)
                point["intra_op_threads"] = float(threads)
                point["own_mode"] = 1.0  # the gateway's own threads and spinning
            other_threads = 1 if threads > 1 else usable_cores()
            updates: list[dict[str, Any]] = [{"ort_spinning": not settings.ort_spinning}]
            if other_threads != threads:  # one core: no other thread count to try
                updates.append({"intra_op_threads": other_threads})
            for update in updates:
                other = settings.model_copy(update=update)
                spare = await make_backend(other, manifest, Metrics())
                try:
                    for point in await _step_curve(
                        ModelRunner(spare, manifest),
                        manifest,
                        params,
                        images,
                        args.max_rows,
                        args.curve_seconds,
                    ):
                        point["ort_spinning"] = float(other.ort_spinning)
                        point["intra_op_threads"] = float(step_threads(spare, step))
                        point["own_mode"] = 0.0
                        curve.append(point)
                finally:
                    await spare.close()
        best = max(curve, key=lambda p: p["rows_per_s"])
        limit = {
            "best_batch_rows": int(best["rows"]),
            "rows_per_s": round(best["rows_per_s"], 1),
            "ideal_captions_per_s": round(best["rows_per_s"] / rows, 2),
        }
        compute = await _compute_limit(engine.runner, manifest, params, images, best["rows_per_s"] / rows)
        naive = await _naive(engine, params, images, args.naive_clients, args.duration)
    finally:
        await engine.close()
    return InProcess(single, rows, steps, limit, curve, naive, compute)


async def _timed(call: Callable[[], Awaitable[object]], seconds: float = 0.5) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this whole process: every onnxruntime thread) per ``call()``,
    after warm-up."""
    for _ in range(2):
        await call()
    calls, start, cpu = 0, time.perf_counter(), time.process_time()
    while calls < 5 or time.perf_counter() - start < seconds:
        await call()
        calls += 1
    return (time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls


async def _compute_limit(
    runner: ModelRunner,
    manifest: Manifest,
    params: SearchParams,
    images: np.ndarray,
    step_captions_per_s: float,
) -> dict[str, Any]:
    """Every model call a caption needs, each at a large batch (64 images, 5 captions each), one after
    another on all cores: the captions/s the models alone allow, and each model's share of it."""
    cap = manifest.captioner(params.model)
    batch = images[np.arange(64) % len(images)]
    n = len(batch)
    ms: dict[str, float] = {}
    cpu: dict[str, float] = {}  # CPU ms per caption of the calls other than the step (all threads)

    async def per_caption(name: str, call: Callable[[], Awaitable[object]]) -> None:
        wall_s, cpu_s = await _timed(call)
        ms[name], cpu[name] = wall_s / n * 1e3, cpu_s / n * 1e3

    if cap.image is not None:  # its own encoder reads the images (an imported captioner)
        await per_caption(cap.init, lambda: runner.encode(cap.name, batch))
        regions = np.zeros((n, 0, 0), dtype=np.float32)
    else:
        await per_caption("visual_encoder", lambda: runner.encode_images(batch))
        regions = await runner.encode_images(batch)
        await per_caption(cap.init, lambda: runner.init(cap.name, regions))
    ms[cap.step] = 1e3 / step_captions_per_s
    if params.ranker is not None:
        ranker = manifest.ranker(params.ranker)
        await per_caption(ranker.image, lambda: runner.embed_images(ranker, regions))
        rng = np.random.default_rng(1)
        captions = [list(rng.integers(4, manifest.vocabulary.size, 9)) for _ in range(n * params.n_best)]
        await per_caption(ranker.text, lambda: runner.embed_captions(ranker, captions))
    total = sum(ms.values())
    return {
        "captions_per_s": round(1e3 / total, 2),
        "ms_per_caption": {k: round(v, 4) for k, v in ms.items()},
        "cpu_ms_per_caption_other": {k: round(v, 4) for k, v in cpu.items()},
        "step_share": round(ms[cap.step] / total, 3),
    }


async def _single_decodes(
    engine: CaptionEngine, metrics: Metrics, params: SearchParams, images: np.ndarray, runs: int
) -> tuple[float, float, float]:
    """Median wall time of one image's full in-process caption (encode, decode, re-rank), and the
    mean rows and step calls one caption needs."""
    for i in range(3):
        await engine.caption(images[i : i + 1], params)
    times, rows, steps = [], [], []
    for i in range(runs):
        image = images[i % len(images)][None]
        step_model = engine.manifest.captioner(params.model).step
        rows_before, calls_before = step_totals(metrics, step_model)
        start = time.perf_counter()
        await engine.caption(image, params)
        times.append((time.perf_counter() - start) * 1e3)
        rows_after, calls_after = step_totals(metrics, step_model)
        rows.append(rows_after - rows_before)
        steps.append(calls_after - calls_before)
    return float(np.median(times)), float(np.mean(rows)), float(np.mean(steps))


async def _step_curve(
    runner: ModelRunner,
    manifest: Manifest,
    params: SearchParams,
    images: np.ndarray,
    max_rows: int,
    seconds_per_size: float = 0.5,
) -> list[dict[str, float]]:
    """rows/s of ``<cap>_step`` alone at each batch size, on the memory of real images."""
    cap = manifest.captioner(params.model)
    n_img = max(1, max_rows // BEAM_SIZE)
    pool = images[np.arange(n_img) % len(images)]
    enc = await runner.encode(cap.name, pool)
    rng = np.random.default_rng(0)
    t = 1 if cap.reads == "last_token" else min(10, cap.max_length)
    out: list[dict[str, float]] = []
    for rows in [r for r in BATCH_ROWS if r <= max_rows]:
        n = rows // BEAM_SIZE
        size = cap.tokens.size if cap.tokens is not None else manifest.vocabulary.size  # its own tokens
        step_rows = StepInput(
            memory=np.ascontiguousarray(enc.memory[:n]),
            image_index=np.repeat(np.arange(n), BEAM_SIZE).astype(np.int64),
            tokens=rng.integers(4, size, (rows, t)).astype(np.int64),
            lengths=np.full(rows, t, dtype=np.int64),
            state=np.repeat(enc.state[:n], BEAM_SIZE, axis=0),
        )

        async def call() -> object:
            return await runner.step(cap.name, step_rows)  # noqa: B023

        seconds, cpu_s = await _timed(call, seconds_per_size)
        out.append(
            {
                "rows": rows,
                "ms_per_call": round(seconds * 1e3, 3),
                "cpu_ms_per_call": round(cpu_s * 1e3, 3),
                "rows_per_s": rows / seconds,
            }
        )
    return out


async def _naive(
    engine: CaptionEngine, params: SearchParams, images: np.ndarray, clients: int, duration: float
) -> float:
    """Captions/s with ``clients`` concurrent callers, each request decoding alone."""
    done = 0
    stop = time.perf_counter() + duration

    async def worker(k: int) -> None:
        nonlocal done
        i = k
        while time.perf_counter() < stop:
            await engine.caption(images[i % len(images)][None], params)
            done += 1
            i += clients

    start = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(clients)))
    return done / (time.perf_counter() - start)


# -- driver -----------------------------------------------------------------------------------------


def local_triton(repo: Path) -> AbstractContextManager[Any]:
    """A real local tritonserver for ``repo`` on free ports (``service.tritonlocal``)."""
    from service.tritonlocal.server import LocalTriton

    return LocalTriton(repo)


@dataclass(frozen=True)
class Plan:
    """What every stage of one bench run shares: the repository, the captioner and its query, the images."""

    repo: Path
    manifest: Manifest
    model: str
    params_kw: dict[str, Any]  # the in-process engine's search parameters
    query: dict[str, str]  # the same over HTTP
    images: np.ndarray
    pngs: list[bytes]

    @property
    def step_model(self) -> str:
        return self.manifest.captioner(self.model).step


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One bench run, stage by stage: the plan (checked before the long runs), the in-process figures
    (single decode, step limit, naive), the gateway's load levels, the references over HTTP (the gateway
    without cross-request batching, the HTTP floor, a per-request peer), then the figures derived per
    load level. A Triton started for the run serves every stage."""
    plan = plan_run(args)
    with ExitStack() as stack:
        env, precision = gateway_environment(args, plan.repo, stack)
        settings = Settings(
            repo=plan.repo,
            backend=args.backend,
            triton_url=env.get("COMPCAP_TRITON_URL", ""),
            precision=precision,
        )
        console.print(f"[bold]in-process[/]: single decode, step curve, naive x{args.naive_clients}")
        local = asyncio.run(in_process(settings, plan.manifest, plan.params_kw, plan.images, args))
        load = gateway_levels(args, plan, env)
        naive_http = naive_gateway(args, plan, env)
        floor = floor_load(args, plan)
        baseline = baseline_load(args, plan, precision)
    out = result_of(args, plan, precision, settings, local, load, naive_http, floor, baseline)
    derive_level_figures(out, settings)
    return out


def plan_run(args: argparse.Namespace) -> Plan:
    """The run's captioner, query and images; a ``--baseline`` that cannot run stops it here, before the
    long runs."""
    repo = Path(args.repo)
    manifest = load_manifest(repo)
    model = args.model or manifest.default_captioner
    params_kw: dict[str, Any] = {"model": model, "beam_size": BEAM_SIZE, "rerank": args.rerank}
    query = {"model": model, "beam_size": str(BEAM_SIZE)}
    if args.rerank is not None:
        query["rerank"] = str(args.rerank).lower() if isinstance(args.rerank, bool) else args.rerank
    if args.baseline == "torch":  # before the long runs: the baseline needs the torch programs
        from loadtests.peers.torch_baseline import missing_programs  # torch: only with --baseline torch

        if isinstance(args.rerank, str):
            raise SystemExit(
                "--baseline torch re-ranks with the captioner's own ranker or none (--rerank none)"
            )
        if missing := missing_programs(repo, model, args.rerank is not False):
            raise SystemExit(
                f"--baseline torch: {repo} has no torch programs for {missing}; "
                f"`compcap-lab build --out {repo}` writes them (a fresh clone's model_repo has the ONNX "
                "files only)"
            )
    if args.baseline == "transformers" and not args.snapshot:
        raise SystemExit(
            "--baseline transformers needs --snapshot DIR: the snapshot --model was imported from"
        )
    images = bench_images(args.images, manifest.image.height, manifest.image.width)
    pngs = [png_bytes(x) for x in images]
    return Plan(repo, manifest, model, params_kw, query, images, pngs)


def gateway_environment(
    args: argparse.Namespace, repo: Path, stack: ExitStack
) -> tuple[dict[str, str], Precision]:
    """The gateways' ``COMPCAP_*`` environment and the run's precision; with ``--backend triton`` and no
    ``--triton-url``, a local Triton started on ``stack`` for the whole run."""
    env = {"COMPCAP_BACKEND": args.backend, "COMPCAP_MAX_QUEUE": str(max(args.clients) * 2)}
    precision = cast("Precision", args.precision or os.environ.get("COMPCAP_PRECISION") or "fp32")
    env["COMPCAP_PRECISION"] = precision
    if args.backend == "triton":
        url = args.triton_url
        if url is None:
            server = stack.enter_context(local_triton(repo))
            url = server.grpc_url
        env["COMPCAP_TRITON_URL"] = url
    return env, precision


def gateway_levels(args: argparse.Namespace, plan: Plan, env: dict[str, str]) -> list[dict[str, Any]]:
    """The gateway under closed-loop load: one row per gateway count, API-process count and client
    count; CPU counted over every process of the loaded gateways. With several API-process counts and
    ``--rounds`` K, the setups run in turn K times (1 2 1 2 …), each row saying its ``round``."""
    load = []
    splits = getattr(args, "api_processes", None) or (1,)
    rounds = (getattr(args, "rounds", None) or 1) if len(splits) > 1 else 1
    setups = [(c, n) for c in getattr(args, "gateways", None) or (1,) for n in splits]
    for round_, (count, processes) in [(r, s) for r in range(1, rounds + 1) for s in setups]:
        with ExitStack() as gateways:
            split_env = {**env, "COMPCAP_API_PROCESSES": str(processes)}
            if processes > 1 and not os.environ.get("COMPCAP_STATE_URL", "default"):
                # the split's processes share their state: a store in this run's temporary folder
                folder = gateways.enter_context(tempfile.TemporaryDirectory(prefix="compcap-bench-"))
                split_env["COMPCAP_STATE_URL"] = f"sqlite:///{folder}/state.db"
            started = [gateways.enter_context(Gateway(plan.repo, split_env)) for _ in range(count)]
            urls = [g.url for g in started]
            # every process of each gateway: with --api-processes its HTTP processes and engine core
            pids = [pid for g in started for pid in process_tree(g.process.pid)]
            if args.backend == "null":  # the gateway's own cost is the figure: not its first requests'
                warm = min(2.0, args.duration)
                asyncio.run(
                    closed_loop(urls, plan.pngs, plan.query, max(args.clients), warm, plan.step_model)
                )
            for clients in args.clients:
                console.print(
                    f"[bold]gateway[/]: {clients} clients for {args.duration:.0f} s"
                    + (f" over {count} gateways" if count > 1 else "")
                    + (f", {processes} API processes and an engine core" if processes > 1 else "")
                    + (f", round {round_} of {rounds}" if rounds > 1 else "")
                )
                row = asyncio.run(
                    closed_loop(urls, plan.pngs, plan.query, clients, args.duration, plan.step_model, pids)
                )
                rounded = {"round": round_} if rounds > 1 else {}
                load.append({"gateways": count, "api_processes": processes, **rounded, **row})
    return load


def naive_gateway(args: argparse.Namespace, plan: Plan, env: dict[str, str]) -> dict[str, Any] | None:
    """The same gateway over HTTP with ``COMPCAP_CROSS_REQUEST_BATCHING=false`` (None: not asked)."""
    if not args.naive_gateway_clients:
        return None
    clients = args.naive_gateway_clients
    console.print(f"[bold]gateway without cross-request batching[/]: {clients} clients")
    with Gateway(plan.repo, {**env, "COMPCAP_CROSS_REQUEST_BATCHING": "false"}) as server:
        return asyncio.run(
            closed_loop(
                server.url, plan.pngs, plan.query, clients, args.duration, plan.step_model, server.process.pid
            )
        )


def floor_load(args: argparse.Namespace, plan: Plan) -> dict[str, Any] | None:
    """The HTTP floor (``loadtests.peers.http_floor``) and its CPU per request (None: not asked)."""
    if not args.floor_clients:
        return None
    console.print(f"[bold]HTTP floor[/] (loadtests.peers.http_floor): {args.floor_clients} clients")
    with Gateway(plan.repo, {}, module=["loadtests.peers.http_floor"], ready="/health") as server:
        return asyncio.run(
            closed_loop(
                server.url, plan.pngs, plan.query, args.floor_clients, args.duration, None, server.process.pid
            )
        )


def baseline_load(args: argparse.Namespace, plan: Plan, precision: Precision) -> dict[str, Any] | None:
    """The per-request peer of ``--baseline`` over HTTP (None: none asked)."""
    # the peer at these client counts only: a per-request peer drains every request sent, one at a time
    clients = getattr(args, "baseline_clients", None) or args.clients
    if args.baseline == "torch":
        return torch_baseline_load(
            plan.repo, plan.model, args.rerank, plan.pngs, plan.query, clients, args.duration
        )
    if args.baseline == "transformers":
        # on the gateway's device and, on CUDA, in its precision (fp16 or fp32): the same GPU
        module = ["loadtests.peers.transformers_baseline", "--snapshot", str(args.snapshot)]
        module += ["--precision", precision]
        return peer_load("transformers", module, plan.repo, plan.pngs, plan.query, clients, args.duration)
    return None


def result_of(
    args: argparse.Namespace,
    plan: Plan,
    precision: Precision,
    settings: Settings,
    local: InProcess,
    load: list[dict[str, Any]],
    naive_http: dict[str, Any] | None,
    floor: dict[str, Any] | None,
    baseline: dict[str, Any] | None,
) -> dict[str, Any]:
    """The run's result: the in-process figures, then each HTTP stage's."""
    return {
        "backend": args.backend,
        "precision": precision,
        "device": settings.device,  # COMPCAP_DEVICE of the in-process engine and of the gateways
        "model": plan.model,
        "rerank": args.rerank,
        "beam_size": BEAM_SIZE,
        "single_decode_ms": round(local.single_decode_ms, 3),
        "rows_per_caption": round(local.rows_per_caption, 1),
        "steps_per_caption": round(local.steps_per_caption, 1),
        "limit": local.limit,
        "step_curve": local.batch_curve,
        "naive": {
            "captions_per_s": round(local.naive_captions_per_s, 2),
            "clients": args.naive_clients,
            "gateway": naive_http,  # the same gateway over HTTP with COMPCAP_CROSS_REQUEST_BATCHING=false
        },
        "compute_limit": local.compute_limit,
        "load": load,
        "split_comparison": paired_split(load),  # the split against one process, paired by round
        "baseline": baseline,  # the per-request peer (torch, transformers) over HTTP at the same clients
        "floor": floor,  # loadtests.peers.http_floor: HTTP + PNG decoding only, its CPU per request
        "cpu_count": os.cpu_count(),
    }


def derive_level_figures(out: dict[str, Any], settings: Settings) -> None:
    """Per load level of a run's result: captions/s per core used, and (not on the null backend) the
    zero-overhead ceiling, the step's slowdown under load against alone, and the CPU bounds."""
    own = own_mode(out["step_curve"], settings)  # the step curve at the gateway's own thread settings
    for row in out["load"]:
        if row.get("server_cores_used"):  # captions/s per core the gateway(s) kept busy
            row["captions_per_s_per_core"] = round(row["captions_per_s"] / row["server_cores_used"], 2)
        if out["backend"] == "null":  # no limit, no step curve: nothing to compare with
            continue
        row["ceiling_of_limit"] = round(ceiling_of_limit(out, row["mean_rows_per_call"]), 3)
        if row.get("step_ms_under_load") and row["mean_rows_per_call"]:
            # the ceiling assumes each step call as fast as alone; on shared cores it is not
            alone = step_ms_alone(out["step_curve"], row["mean_rows_per_call"])
            row["step_ms_alone"] = round(alone, 3)
            # from the printed figures, so that they agree with each other (a tiny model's step alone
            # takes ~0.1 ms, where rounding to 3 decimals moves the ratio by up to 0.5%)
            row["step_slowdown"] = round(row["step_ms_under_load"] / max(row["step_ms_alone"], 1e-3), 2)
            if own:  # alone with the gateway's own threads per call (the best mode may use every core)
                row["step_ms_alone_own"] = round(step_ms_alone(own, row["mean_rows_per_call"]), 3)
                row["step_slowdown_own"] = round(
                    row["step_ms_under_load"] / max(row["step_ms_alone_own"], 1e-3), 2
                )
        # the models' CPU is timed in this process: on Triton it runs in tritonserver, uncounted
        if "cpu_ms_per_caption" in row and out["backend"] == "onnxruntime":
            row["cpu_bounds_of_limit"] = bounds_of_limit(out, row)
            model_ms = row["cpu_bounds_of_limit"]["model_cpu_ms_per_caption"]
            row["gateway_cpu_ms_above_models"] = round(row["cpu_ms_per_caption"]["server"] - model_ms, 3)


def own_mode(curve: Sequence[dict[str, float]], settings: Settings) -> list[dict[str, float]]:
    """The step-curve points measured with the gateway's own thread settings (onnxruntime: its threads
    per step call and spinning; [] for other backends, whose curve has one mode)."""
    if settings.backend != "onnxruntime":
        return []
    return [p for p in curve if p.get("own_mode")]


def step_threads(backend: Any, step: str) -> int:
    """The intra-op threads of ``backend``'s calls to ``step`` (an ``OnnxRuntimeBackend``'s)."""
    return int(backend.threads_of.get(step, backend.threads))


def torch_baseline_load(
    repo: Path,
    model: str,
    rerank: bool | None,
    pngs: list[bytes],
    query: dict[str, str],
    clients: Sequence[int],
    duration: float,
) -> dict[str, Any]:
    """The torch per-request baseline (``loadtests.peers.torch_baseline``) over HTTP at each client count."""
    module = ["loadtests.peers.torch_baseline", "--model", model] + (
        ["--no-rerank"] if rerank is False else []
    )
    return peer_load("torch", module, repo, pngs, query, clients, duration)


def peer_load(
    name: str,
    module: list[str],
    repo: Path,
    pngs: list[bytes],
    query: dict[str, str],
    clients: Sequence[int],
    duration: float,
) -> dict[str, Any]:
    """A per-request peer server (``module``) over HTTP at each client count."""
    rows = []
    with Gateway(repo, {}, module=module, ready="/health") as server:
        for n in clients:
            console.print(f"[bold]{name} baseline[/]: {n} clients for {duration:.0f} s")
            rows.append(asyncio.run(closed_loop(server.url, pngs, query, n, duration, None)))
    return {"name": name, "load": rows}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=["onnxruntime", "triton", "null"],
        default="onnxruntime",
        help="the model backend; null: no models, outputs at zero cost (the gateway's own ceiling: the step "
        "and compute limits are skipped)",
    )
    blocks.counts(
        parser,
        "--gateways",
        "independent gateway processes loaded at once, clients spread over them; one load run per "
        "count and client count",
        (1,),
    )
    blocks.counts(
        parser,
        "--api-processes",
        "HTTP processes of each gateway (compcap serve --api-processes; above 1 with one engine "
        "core); one load run per count, CPU counted over all of a gateway's processes",
        (1,),
    )
    blocks.counts(parser, "--clients", "closed-loop client counts, one load level each", (1, 8, 32, 64))
    add_renamed(
        parser,
        "--seconds",
        "--duration",
        dest="duration",
        metavar="SECONDS",
        type=positive_float,
        default=20.0,
        help="seconds per load level",
    )
    blocks.json_output(parser)
    blocks.repository(parser)
    blocks.captioner(parser, "the manifest's default")
    blocks.reranking(parser)
    blocks.images(parser, "distinct bench images", 64)
    parser.add_argument(
        "--single-runs", type=positive_int, default=50, help="single-image captions timed one by one"
    )
    parser.add_argument(
        "--naive-clients",
        type=positive_int,
        default=32,
        help="concurrent callers of the engine without cross-request batching",
    )
    parser.add_argument(
        "--naive-gateway-clients",
        type=non_negative_int,
        default=32,
        help="also load a gateway without cross-request batching at this many clients (0: skip)",
    )
    parser.add_argument(
        "--max-rows", type=positive_int, default=640, help="largest step batch in the limit curve"
    )
    parser.add_argument(
        "--curve-seconds", type=positive_float, default=0.5, help="timing per step batch size"
    )
    parser.add_argument("--triton-url", default=None, help="use this Triton instead of starting one")
    parser.add_argument(
        "--floor-clients",
        type=non_negative_int,
        default=32,
        help="also load the HTTP floor server (loadtests.peers.http_floor) at this many clients, for the "
        "CPU bounds (0: skip)",
    )
    parser.add_argument(
        "--baseline",
        choices=["none", "torch", "transformers"],
        default="none",
        help="also load a per-request peer server at the same client counts: torch "
        "(loadtests.peers.torch_baseline; needs the repository's torch programs, written by "
        "`compcap-lab build`) "
        "or transformers (loadtests.peers.transformers_baseline: generate() on --snapshot, the snapshot the "
        "imported --model came from)",
    )
    blocks.counts(
        parser,
        "--baseline-clients",
        "--baseline: load the peer at these client counts only (default: --clients)",
    )
    blocks.dataset(parser, "--baseline transformers: the snapshot directory", flag="--snapshot")
    parser.add_argument(
        "--no-optimum",
        action="store_true",
        help="--baseline transformers --rounds: leave Optimum's peer out even where its environment exists",
    )
    parser.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default=None,
        help="the models' precision (COMPCAP_PRECISION; default: the environment's, else fp32)",
    )
    parser.add_argument(
        "--compare-precision",
        action="store_true",
        help="run the whole bench at fp32 and at int8 in turn, --rounds times each (A B A B: a shared "
        "machine's load falls on both), and report the medians and the int8/fp32 ratios",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=None,
        help="--compare-precision: runs of each precision (default 2); with several --api-processes "
        "counts: load runs of each count, in turn (1 2 1 2 …), compared round by round (default 1); with "
        "--baseline transformers: rounds of the gateway and the imported captioner's peers in turn (its "
        "per-request server, generate() batched offline, Optimum's ONNX Runtime model where `make "
        "optimum-venv` made its environment), the in-process stages skipped",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compcap bench", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return bench(args)


def bench(args: argparse.Namespace) -> int:
    if isinstance(args.clients, str):
        args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
    peers = getattr(args, "baseline", None) == "transformers"
    rounds_apply = (
        getattr(args, "compare_precision", False)
        or len(getattr(args, "api_processes", None) or ()) > 1
        or peers
    )
    if getattr(args, "rounds", None) is not None and not rounds_apply:
        raise SystemExit(
            "--rounds repeats --compare-precision, several --api-processes counts in turn, or "
            "--baseline transformers and its peers in turn"
        )
    if peers and getattr(args, "rounds", None):
        result = against_peers(args)
    elif getattr(args, "compare_precision", False):
        if args.backend == "null":
            raise SystemExit(
                "--compare-precision compares models' precisions: the null backend has no models"
            )
        result = compare_precision(args)
    else:
        result = run(args)
        console.print(summary(result))
        if result["split_comparison"]:
            console.print(paired_table(result["split_comparison"]))
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
        console.print(f"wrote {args.json}")
    else:
        print(text)
    return 0


def against_peers(args: argparse.Namespace) -> dict[str, Any]:
    """``--baseline transformers --rounds K``: CompCap's gateway and the imported captioner's peers in
    turn, K rounds (``loadtests.bench.peer_rounds``), without the in-process stages."""
    from loadtests.bench.peer_rounds import peer_rounds, peers_table

    plan = plan_run(args)
    with ExitStack() as stack:
        env, precision = gateway_environment(args, plan.repo, stack)
        found = peer_rounds(args, plan, env)
    console.print(peers_table(found["pairs"]))
    return {"backend": args.backend, "precision": precision, "model": plan.model, "beam_size": BEAM_SIZE,
            "cpu_count": os.cpu_count(), "rounds": args.rounds, **found}  # fmt: skip


def compare_precision(args: argparse.Namespace) -> dict[str, Any]:
    """The bench at fp32 and at int8 in turn, ``args.rounds`` times each; per figure (the step limit,
    captions/s at each client count) the median of each precision and their ratio, int8 / fp32."""
    runs: dict[str, list[dict[str, Any]]] = {"fp32": [], "int8": []}
    rounds = args.rounds or 2
    for n in range(rounds):
        for precision in runs:
            console.print(f"[bold]precision {precision}[/], round {n + 1} of {rounds}")
            one = {**vars(args), "precision": precision, "rounds": 1}
            runs[precision].append(run(argparse.Namespace(**one)))
            console.print(summary(runs[precision][-1]))
    figures: dict[str, dict[str, float]] = {}

    def figure(name: str, pick: Callable[[dict[str, Any]], float]) -> None:
        medians = {p: float(np.median([pick(r) for r in rs])) for p, rs in runs.items()}
        figures[name] = {
            **{p: round(v, 2) for p, v in medians.items()},
            "ratio": round(medians["int8"] / medians["fp32"], 3) if medians["fp32"] else 0.0,
        }

    figure("step_limit_rows_per_s", lambda r: r["limit"]["rows_per_s"])
    figure("single_decode_ms", lambda r: r["single_decode_ms"])
    figure("compute_limit_captions_per_s", lambda r: r["compute_limit"]["captions_per_s"])
    for k, clients in enumerate(args.clients):
        figure(f"captions_per_s_at_{clients}", _level(k, "captions_per_s"))
        figure(f"p50_ms_at_{clients}", _level(k, "p50_ms"))
    table = Table(title="compcap bench --compare-precision: medians of each precision, int8 / fp32")
    for col in ("figure", "fp32", "int8", "int8 / fp32"):
        table.add_column(col, justify="right")
    for name, row in figures.items():
        table.add_row(name, f"{row['fp32']:g}", f"{row['int8']:g}", f"{row['ratio']:.3f}")
    console.print(table)
    return {"rounds": rounds, "comparison": figures, "runs": runs}


def _level(k: int, key: str) -> Callable[[dict[str, Any]], float]:
    """``key`` of a bench result's ``k``-th load level."""
    return lambda result: float(result["load"][k][key])


__all__ = ["add_arguments", "bench", "compare_precision", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
