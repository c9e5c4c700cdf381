"""Embedded backend: one onnxruntime ``InferenceSession`` per model, run off the event loop."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from service.backends.base import Backend, BackendError, DeviceArray
from service.backends.device import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    DeviceError,
    check_device,
    cuda_problem,
    provider_options,
    session_device,
    summary,
)
from service.checks import at_least
from service.manifest import Manifest
from service.metrics import Metrics

log = logging.getLogger(__name__)


def providers(device: str = "auto") -> list[object]:
    """The providers sessions ask for on ``device`` (``COMPCAP_DEVICE``): CUDA with TF32 off first
    where this onnxruntime build has it and it can be used here (``cuda_problem``), CPU always.
    ``cuda`` where CUDA cannot be used is a ``DeviceError`` naming the setting and the reason; ``auto``
    then asks for the CPU alone and logs why (rather than each session failing over with an error)."""
    check_device(device)
    if device == "cpu" or (device == "auto" and CUDA_PROVIDER not in ort.get_available_providers()):
        return [CPU_PROVIDER]
    problem = cuda_problem()
    if problem is not None:
        if device == "cuda":
            raise DeviceError(f"COMPCAP_DEVICE=cuda: CUDA cannot be used here: {problem}")
        log.warning("COMPCAP_DEVICE=auto: serving on the CPU: %s", problem)
        return [CPU_PROVIDER]
    return provider_options(device, ort.get_available_providers())


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS says, else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def intra_op_threads(requested: int, executor_threads: int, cores: int | None = None) -> int:
    """Threads per call of a light model: ``requested``, or for 0 ("auto") the cores shared by the calls
    the executor runs at once, ``max(1, cores // executor_threads)``. onnxruntime's own default (every
    core for every session's call) oversubscribes the cores once several calls run together: at 32
    clients on 2 cores it cost 1–3 ms more CPU per caption than one thread per call, with as many
    captions/s or fewer (docs/benchmarks.md)."""
    at_least(0, requested=requested)
    at_least(1, executor_threads=executor_threads)
    if requested:
        return requested
    return max(1, (usable_cores() if cores is None else cores) // executor_threads)


# a model of at least this many bytes is heavy: with threads on "auto" each of its calls gets every core
WIDE_MODEL_BYTES = 64 * 1024 * 1024


def model_threads(requested: int, executor_threads: int, model_bytes: int, cores: int | None = None) -> int:
    """Threads per call of a model of ``model_bytes``: ``requested``; or for 0 ("auto") every core for a
    heavy model (``WIDE_MODEL_BYTES`` or more: an imported ViT-base + GPT-2's calls take 40–250 ms, and
    a lone request's run 1.5–1.8 times faster on two threads than on one, while two such calls at once
    lose 5–8% to sharing the cores), and a light model's share (``intra_op_threads``: its calls of a
    millisecond or less gain nothing from a second thread and pay for waking it)."""
    at_least(0, model_bytes=model_bytes)
    if requested or model_bytes < WIDE_MODEL_BYTES:
        return intra_op_threads(requested, executor_threads, cores)
    return usable_cores() if cores is None else cores


def session_options(threads: int, spin: bool, level: ort.GraphOptimizationLevel) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    if not spin:  # idle pool threads sleep instead of spinning (several calls share few cores)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.inter_op_num_threads = 1
    options.graph_optimization_level = level
    return options


# onnxruntime 1.31's CPU provider crashes (SIGSEGV) creating an FP16 LSTM step at ORT_ENABLE_ALL (its
# CPU layout passes), not at ORT_ENABLE_EXTENDED: FP16 variants on the CPU load at EXTENDED
FP16_CPU_LEVEL = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED


# a read-only input array of at least this many bytes is taken as immutable and kept on the session's
# device while the caller passes the same array (the engine's image memory: uploaded once per change of
# the batch's images, not once per step)
RESIDENT_BYTES = 64 * 1024


class ResidentInputs:
    """Device copies (``OrtValue``) of read-only input arrays, one per (model, input), reused while a call
    passes the same array object (identity through a weak reference; a read-only array's data does not
    change under it). ``uploads`` and ``reuses`` count what it did."""

    def __init__(self, min_bytes: int = RESIDENT_BYTES) -> None:
        self.min_bytes = min_bytes
        self._kept: dict[tuple[str, str], tuple[weakref.ref[np.ndarray], ort.OrtValue]] = {}
        self.uploads = self.reuses = 0

    def value(self, model: str, name: str, array: np.ndarray, device: str) -> ort.OrtValue | None:
        """The device copy of ``array`` for ``model``'s input ``name``, or None: not one to keep."""
        if array.flags.writeable or array.nbytes < self.min_bytes or not array.flags.c_contiguous:
            return None
        found = self._kept.get((model, name))
        if found is not None and found[0]() is array:
            self.reuses += 1
            return found[1]
        value = ort.OrtValue.ortvalue_from_numpy(array, device, 0)
        self._kept[(model, name)] = (weakref.ref(array), value)
        self.uploads += 1
        return value


class OnnxRuntimeBackend:
    """Loads ``<repo>/<model>/1/model.onnx`` for every model in the manifest (synchronously: construct
    it off the event loop) and runs ``infer`` calls in a small thread pool. At ``precision`` int8 or
    fp16 a model with a variant that passed its gate loads the variant's file under the FP32 model's
    name (``Manifest.served_models``; ``paths`` says which file serves each name). ``device``
    (``COMPCAP_DEVICE``: auto, cpu, cuda) chooses the providers; ``devices`` and ``session_providers``
    say, per model, what each session actually got (``get_providers()``), and ``device=cuda`` with a
    model left on the CPU is a ``DeviceError``."""

    def __init__(
        self,
        repo: str | Path,
        manifest: Manifest,
        threads: int = 0,
        metrics: Metrics | None = None,
        executor_threads: int = 4,
        spin: bool = True,
        precision: str = "fp32",
        *,
        device: str = "auto",
    ) -> None:
        at_least(0, threads=threads)
        at_least(1, executor_threads=executor_threads)
        repo = Path(repo)
        if not repo.is_dir():
            raise ValueError(f"repo {repo} is not a directory")
        self.metrics = metrics
        self.device = check_device(device)
        self.providers = providers(device)
        self.threads = intra_op_threads(threads, executor_threads)  # a light model's calls
        self.sessions: dict[str, ort.InferenceSession] = {}
        self.threads_of: dict[str, int] = {}  # model name -> its calls' intra-op threads
        self.outputs: dict[str, list[str]] = {}
        self.precision = precision
        self.paths: dict[str, Path] = {}  # model name -> the file its session runs
        self.devices: dict[str, str] = {}  # model name -> the device its session runs on
        self.session_providers: dict[str, list[str]] = {}  # model name -> its session's get_providers()
        on_cpu = self.providers == [CPU_PROVIDER]
        for name, served in manifest.served_models(precision).items():
            path = manifest.model(served).path(repo)
            if not path.is_file():
                raise ValueError(f"model {served!r}: {path} does not exist")
            self.threads_of[name] = model_threads(threads, executor_threads, path.stat().st_size)
            fp16_on_cpu = on_cpu and precision == "fp16" and served != name
            level = session_options(
                self.threads_of[name],
                spin,
                FP16_CPU_LEVEL if fp16_on_cpu else ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            )
            chain = self.providers
            if precision == "tf32" and served != name and not on_cpu:  # its gate admitted TF32 for it
                chain = provider_options(device, ort.get_available_providers(), tf32=True)
            session = ort.InferenceSession(str(path), sess_options=level, providers=chain)
            self.sessions[name] = session
            self.outputs[name] = [o.name for o in session.get_outputs()]
            self.paths[name] = path
            self.session_providers[name] = list(session.get_providers())
            self.devices[name] = session_device(self.session_providers[name])
        left = sorted(name for name, where in self.devices.items() if where != "cuda")
        if device == "cuda" and left:
            raise DeviceError(
                f"COMPCAP_DEVICE=cuda: {', '.join(left)} fell back to the CPU (onnxruntime's log says why)"
            )
        if metrics is not None:
            for name, where in self.devices.items():
                metrics.model_device.labels(
                    model=name, device=where, provider=self.session_providers[name][0]
                ).set(1)
        self._call_seconds = {  # each model's histogram series, looked up once
            name: metrics.model_call.labels(model=name) for name in self.sessions if metrics is not None
        }
        self._executor = ThreadPoolExecutor(max_workers=executor_threads, thread_name_prefix="ort")
        self.resident = ResidentInputs()
        variants = sum(path.parent.parent.name != name for name, path in self.paths.items())
        log.info(
            "onnxruntime backend: %d models (%s, %d variants) on %s (COMPCAP_DEVICE=%s; %s), intra-op "
            "threads per call: %s",
            len(self.sessions),
            precision,
            variants,
            summary(self.devices),
            device,
            ", ".join(f"{name} {where}" for name, where in sorted(self.devices.items())),
            ", ".join(f"{name} {n}" for name, n in sorted(self.threads_of.items())),
        )

    def _run(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray | DeviceArray],
        names: list[str],
        keep: Sequence[str],
    ) -> dict[str, Any]:
        session = self.sessions[model]
        start = time.perf_counter()
        try:
            values = self._bound_run(model, session, inputs, names, keep)
        except (ort.capi.onnxruntime_pybind11_state.InvalidArgument, ValueError) as exc:
            raise self._fail(model, "bad_input", str(exc)) from exc
        except Exception as exc:
            raise self._fail(model, "runtime", str(exc)) from exc
        if self.metrics is not None:
            self._call_seconds[model].observe(time.perf_counter() - start)
        return dict(zip(names, values, strict=True))

    def _bound_run(
        self,
        model: str,
        session: ort.InferenceSession,
        inputs: Mapping[str, np.ndarray | DeviceArray],
        names: list[str],
        keep: Sequence[str] = (),
    ) -> list[np.ndarray | DeviceArray]:
        """``session.run``, except that (I/O binding) read-only inputs big enough (``ResidentInputs``)
        are bound as the device copies kept from an earlier call, ``DeviceArray`` inputs as they are,
        the others copied in; the outputs in ``keep`` are left on the session's device as
        ``DeviceArray`` s, the others copied out."""
        device = self.devices[model]
        bound: dict[str, ort.OrtValue] = {}
        for name, value in inputs.items():
            if isinstance(value, DeviceArray):
                bound[name] = value.value
            elif (resident := self.resident.value(model, name, value, device)) is not None:
                bound[name] = resident
        if not bound and not keep:
            return session.run(names, dict(inputs))  # arrays only here
        binding = session.io_binding()
        for name, value in inputs.items():
            if name in bound:
                binding.bind_ortvalue_input(name, bound[name])
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in names:
            binding.bind_output(name, device if name in keep else "cpu")
        session.run_with_iobinding(binding)
        return [
            DeviceArray(value, tuple(value.shape()), value.numpy) if name in keep else value.numpy()
            for name, value in zip(names, binding.get_outputs(), strict=True)
        ]

    def _fail(self, model: str, reason: str, message: str) -> BackendError:
        """The error of a call to ``model``, counted (``compcap_backend_errors_total``)."""
        if self.metrics is not None:
            self.metrics.backend_errors.labels(model=model, reason=reason).inc()
        return BackendError(model, reason, message)

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray | DeviceArray],
        outputs: Sequence[str] | None = None,
        keep: Sequence[str] = (),
    ) -> dict[str, Any]:
        """``outputs``: only these (onnxruntime copies only them off the device), else every output.
        ``keep``: outputs left on the session's device, returned as ``DeviceArray`` s that a later call
        of this backend takes as inputs without a copy (the decoder state of a v3 step)."""
        if model not in self.sessions:
            raise self._fail(model, "unknown_model", "no such model in the repository")
        names = self.outputs[model] if outputs is None else list(outputs)
        if not set(names) <= set(self.outputs[model]):
            raise self._fail(
                model, "bad_input", f"no outputs {sorted(set(names) - set(self.outputs[model]))}"
            )
        if not set(keep) <= set(names):
            raise self._fail(model, "bad_input", f"cannot keep outputs not asked for: {sorted(keep)}")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, model, inputs, names, tuple(keep))

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.sessions.clear()


async def build(settings: Any, manifest: Manifest, metrics: Metrics) -> Backend:
    """The embedded backend of the engine's ``settings`` (the registry's ``onnxruntime`` record), its
    sessions loaded off the event loop."""
    return await asyncio.to_thread(
        OnnxRuntimeBackend,
        settings.repo,
        manifest,
        settings.intra_op_threads,
        metrics,
        settings.executor_threads,
        settings.ort_spinning,
        settings.precision,
        device=settings.device,
    )
