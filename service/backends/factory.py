"""Build the backend named in settings (``COMPCAP_BACKEND``)."""

from __future__ import annotations

import asyncio

from service.backends.base import Backend
from service.manifest import Manifest
from service.metrics import Metrics
from service.settings import EngineSettings


async def make_backend(settings: EngineSettings, manifest: Manifest, metrics: Metrics) -> Backend:
    """The backend for ``settings.backend``, loaded and ready to serve."""
    if settings.backend == "onnxruntime":
        try:
            from service.backends.onnxruntime import OnnxRuntimeBackend
        except ImportError as exc:
            raise RuntimeError(
                f"COMPCAP_BACKEND=onnxruntime needs onnxruntime ({exc}): install compcap[cpu] or compcap[gpu]"
            ) from exc

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
    if settings.backend == "triton":
        try:
            from service.backends.triton import TritonBackend
        except ImportError as exc:
            raise RuntimeError(
                f"COMPCAP_BACKEND=triton needs the Triton client ({exc}): install compcap[triton]"
            ) from exc

        backend = await TritonBackend.connect(
            settings.triton_url,
            manifest,
            metrics,
            timeout_s=settings.triton_startup_s,
            shared_memory=settings.triton_shared_memory,
            repo=settings.repo,
            resolve_s=settings.triton_resolve_s,
        )
        if settings.precision == "fp32":
            return backend
        from service.backends.precision import ServedNames  # the int8 variants' Triton models

        return ServedNames(backend, manifest.served_models(settings.precision), settings.precision)
    if settings.backend == "null":  # no models: the gateway's own ceiling (compcap bench --backend null)
        from service.backends.null import NullBackend

        return NullBackend(manifest, metrics)
    raise ValueError(f"backend {settings.backend!r} is not built yet")
