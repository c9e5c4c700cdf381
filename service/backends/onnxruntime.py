"""Embedded backend: one onnxruntime ``InferenceSession`` per model, run off the event loop."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort

from service.backends.base import BackendError
from service.manifest import Manifest
from service.metrics import Metrics

log = logging.getLogger(__name__)


def providers() -> list[str]:
    """CUDA first when this onnxruntime build has it, CPU always."""
    available = ort.get_available_providers()
    chosen = ["CUDAExecutionProvider"] if "CUDAExecutionProvider" in available else []
    return [*chosen, "CPUExecutionProvider"]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS says, else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def intra_op_threads(requested: int, executor_threads: int, cores: int | None = None) -> int:
    """Threads per model call: ``requested``, or for 0 ("auto") the cores shared by the calls the
    executor runs at once, ``max(1, cores // executor_threads)``. onnxruntime's own default (every
    core for every session's call) oversubscribes the cores once several calls run together: at 32
    clients on 2 cores it cost 1–3 ms more CPU per caption than one thread per call, with as many
    captions/s or fewer (docs/benchmarks.md)."""
    if requested < 0:
        raise ValueError(f"requested must be >= 0, got {requested}")
    if executor_threads < 1:
        raise ValueError(f"executor_threads must be >= 1, got {executor_threads}")
    if requested:
        return requested
    return max(1, (usable_cores() if cores is None else cores) // executor_threads)


class OnnxRuntimeBackend:
    """Loads ``<repo>/<model>/1/model.onnx`` for every model in the manifest (synchronously: construct
    it off the event loop) and runs ``infer`` calls in a small thread pool. At ``precision`` int8 a
    model with a variant that passed its gate loads the variant's file under the FP32 model's name
    (``Manifest.served_models``; ``paths`` says which file serves each name)."""

    def __init__(
        self,
        repo: str | Path,
        manifest: Manifest,
        threads: int = 0,
        metrics: Metrics | None = None,
        executor_threads: int = 4,
        spin: bool = True,
        precision: str = "fp32",
    ) -> None:
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        if executor_threads < 1:
            raise ValueError(f"executor_threads must be >= 1, got {executor_threads}")
        repo = Path(repo)
        if not repo.is_dir():
            raise ValueError(f"repo {repo} is not a directory")
        self.metrics = metrics
        self.providers = providers()
        self.threads = intra_op_threads(threads, executor_threads)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        if not spin:  # idle pool threads sleep instead of spinning (several calls share few cores)
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.sessions: dict[str, ort.InferenceSession] = {}
        self.outputs: dict[str, list[str]] = {}
        self.precision = precision
        self.paths: dict[str, Path] = {}  # model name -> the file its session runs
        for name, served in manifest.served_models(precision).items():
            path = manifest.model(served).path(repo)
            if not path.is_file():
                raise ValueError(f"model {served!r}: {path} does not exist")
            session = ort.InferenceSession(str(path), sess_options=options, providers=self.providers)
            self.sessions[name] = session
            self.outputs[name] = [o.name for o in session.get_outputs()]
            self.paths[name] = path
        self._call_seconds = {  # each model's histogram series, looked up once
            name: metrics.model_call.labels(model=name) for name in self.sessions if metrics is not None
        }
        self._executor = ThreadPoolExecutor(max_workers=executor_threads, thread_name_prefix="ort")
        variants = sum(path.parent.parent.name != name for name, path in self.paths.items())
        log.info(
            "onnxruntime backend: %d models (%s, %d variants) on %s, %d intra-op threads per call",
            len(self.sessions),
            precision,
            variants,
            self.providers,
            self.threads,
        )

    def _run(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self.sessions[model]
        start = time.perf_counter()
        try:
            values = session.run(self.outputs[model], inputs)
        except (ort.capi.onnxruntime_pybind11_state.InvalidArgument, ValueError) as exc:
            self._count(model, "bad_input")
            raise BackendError(model, "bad_input", str(exc)) from exc
        except Exception as exc:
            self._count(model, "runtime")
            raise BackendError(model, "runtime", str(exc)) from exc
        if self.metrics is not None:
            self._call_seconds[model].observe(time.perf_counter() - start)
        return dict(zip(self.outputs[model], values, strict=True))

    def _count(self, model: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.backend_errors.labels(model=model, reason=reason).inc()

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if model not in self.sessions:
            self._count(model, "unknown_model")
            raise BackendError(model, "unknown_model", "no such model in the repository")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, model, inputs)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.sessions.clear()
