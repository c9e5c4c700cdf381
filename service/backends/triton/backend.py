"""Triton backend: the repository's models served by Triton Inference Servers, called over gRPC
(``tritonclient.grpc.aio``), tensors in the request payload or, for one co-located server, in system
shared memory. ``COMPCAP_TRITON_URL`` names one address, a list, or a DNS name whose addresses all get
calls (``pool.py``: one client per address, least-outstanding picking, ejection and probes, one
retry elsewhere when an address goes away). Build it with ``await TritonBackend.connect(url, manifest,
metrics)``, which waits (bounded) until an address has its server and every model of the manifest ready
and serves the manifest's models (``addresses.identity_problems``)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException
from tritonclient.utils.shared_memory import SharedMemoryException

from service.backends.base import Backend, BackendError
from service.backends.precision import ServedNames
from service.backends.triton.addresses import Address, ModelIdentity, State, expected_identities
from service.backends.triton.pool import TritonPool
from service.backends.triton.request import ModelCall
from service.backends.triton.shm import RegionPool
from service.backends.triton.url import triton_target
from service.manifest import Manifest
from service.metrics import Metrics

log = logging.getLogger(__name__)

STARTUP_S = 300.0  # COMPCAP_TRITON_STARTUP_S: Triton's own startup probe budget in k8s/
RESOLVE_S = 10.0  # COMPCAP_TRITON_RESOLVE_S
CALL_TIMEOUT_S = 30.0
MAX_MESSAGE_BYTES = 2**31 - 1

# gRPC status → stable reason of BackendError
_REASONS = {
    "StatusCode.INVALID_ARGUMENT": "bad_input",
    "StatusCode.OUT_OF_RANGE": "bad_input",
    "StatusCode.NOT_FOUND": "unknown_model",
    "StatusCode.UNAVAILABLE": "unavailable",
    "StatusCode.DEADLINE_EXCEEDED": "unavailable",
    "StatusCode.CANCELLED": "unavailable",
    "StatusCode.RESOURCE_EXHAUSTED": "unavailable",
}


def reason_of(exc: InferenceServerException) -> str:
    """The stable reason for a tritonclient error (``runtime`` when the status says nothing better)."""
    return _REASONS.get(str(exc.status()), "runtime")


class TritonBackend:
    """Runs ``infer`` calls on Triton servers over gRPC. Per-image models (``max_batch_size > 0``) are
    split into chunks of at most ``max_batch_size`` items, sent concurrently and concatenated, so
    callers may batch as freely as with the embedded backend. ``shared_memory`` sends tensors through
    system shared memory: one address only, whose server must share this host's ``/dev/shm``."""

    def __init__(
        self,
        url: str,
        manifest: Manifest,
        metrics: Metrics | None = None,
        shared_memory: bool = False,
        call_timeout_s: float = CALL_TIMEOUT_S,
        *,
        resolve_s: float = RESOLVE_S,
        expected: dict[str, ModelIdentity] | None = None,
    ) -> None:
        self.url = url
        self.target = triton_target(url, shared_memory)
        self.metrics = metrics
        self.call_timeout_s = call_timeout_s
        self.calls = {entry.name: ModelCall(entry) for entry in manifest.models}
        self._subsets: dict[tuple[str, tuple[str, ...]], ModelCall] = {}
        expected = expected if expected is not None else expected_identities(manifest)
        self.servers = TritonPool(self.target, expected, _channel_args(), metrics, resolve_s)
        self.pool = RegionPool(self.client, call_timeout_s) if shared_memory else None
        if self.pool is not None:
            self.servers.on_readmit = self._readmitted

    @property
    def client(self) -> grpcclient.InferenceServerClient:
        """The client of the first address (of the only one for ``host:port``)."""
        return next(iter(self.servers.clients.values()))

    @classmethod
    async def connect(
        cls,
        url: str,
        manifest: Manifest,
        metrics: Metrics | None = None,
        timeout_s: float = STARTUP_S,
        shared_memory: bool = False,
        *,
        repo: Path | None = None,
        resolve_s: float = RESOLVE_S,
    ) -> TritonBackend:
        """A backend with an address whose server and models are ready and are the manifest's
        (``BackendError`` if none is within ``timeout_s``). With ``repo``, the models' ONNX files there
        are the ones every address must serve (by sha256, where the server publishes it)."""
        expected = await asyncio.to_thread(expected_identities, manifest, repo)
        backend = cls(url, manifest, metrics, shared_memory, resolve_s=resolve_s, expected=expected)
        try:
            await backend.servers.start(timeout_s)
        except BaseException:
            await backend.close()
            raise
        devices = backend.devices
        log.info(
            "triton backend: %d models at %s (%s), tensors %s, instances on %s",
            len(backend.calls),
            backend.target,
            backend.servers.addresses.summary(),
            "in shared memory" if shared_memory else "over gRPC",
            ", ".join(f"{model} {kind}" for model, kind in sorted(devices.items())) or "unknown devices",
        )
        if metrics is not None:
            for model, kind in devices.items():
                metrics.model_device.labels(model=model, device=kind, provider="triton").set(1)
        return backend

    @property
    def devices(self) -> dict[str, str]:
        """Model -> where Triton runs its instances (``cuda`` for KIND_GPU, ``cpu`` for KIND_CPU), as the
        healthy servers' model configs say."""
        return self.servers.devices

    async def _readmitted(self, address: Address) -> None:
        """The address came back (its server may have restarted): register shared memory afresh."""
        if self.pool is not None:
            await self.pool.reset()

    def _only(self, call: ModelCall, outputs: Sequence[str]) -> ModelCall:
        """``call`` asking the server for ``outputs`` alone (one ``ModelCall`` per set, kept)."""
        key = (call.name, tuple(outputs))
        found = self._subsets.get(key)
        if found is None:
            unknown = sorted(set(outputs) - set(call.output_names))
            if unknown:
                raise BackendError(call.name, "bad_input", f"no outputs {unknown}")
            kept = [t for t in call.entry.outputs if t.name in set(outputs)]
            found = self._subsets[key] = ModelCall(call.entry.model_copy(update={"outputs": kept}))
        return found

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """``outputs``: ask the server for only these (the rest are not sent back), else every output."""
        call = self.calls.get(model)
        if call is None:
            self._count(model, "unknown_model")
            raise BackendError(model, "unknown_model", "no such model in the repository")
        if outputs is not None:
            try:
                call = self._only(call, outputs)
            except BackendError as exc:
                self._count(model, exc.reason)
                raise
        start = time.perf_counter()
        try:
            try:
                call.check(inputs)
            except ValueError as exc:
                raise BackendError(model, "bad_input", str(exc)) from exc
            rows = _rows(inputs) if call.max_batch > 0 else 0
            if rows > call.max_batch:
                chunks = [
                    {k: v[i : i + call.max_batch] for k, v in inputs.items()}
                    for i in range(0, rows, call.max_batch)
                ]
                parts = await asyncio.gather(*(self._call(call, chunk) for chunk in chunks))
                result = {k: np.concatenate([p[k] for p in parts]) for k in call.output_names}
            else:
                result = await self._call(call, inputs)
        except BackendError as exc:
            self._count(model, exc.reason)
            raise
        if self.metrics is not None:
            self.metrics.model_call.labels(model=model).observe(time.perf_counter() - start)
        return result

    async def _call(self, call: ModelCall, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            attempt = functools.partial(self._attempt, call, inputs)
            return await self.servers.call(call.name, attempt, self.call_timeout_s)
        except BackendError:
            raise
        except ValueError as exc:
            raise BackendError(call.name, "bad_input", str(exc)) from exc
        except InferenceServerException as exc:
            raise BackendError(call.name, reason_of(exc), exc.message() or str(exc)) from exc
        except (RuntimeError, OSError, SharedMemoryException) as exc:
            raise BackendError(call.name, "runtime", str(exc)) from exc

    async def _attempt(
        self,
        call: ModelCall,
        inputs: dict[str, np.ndarray],
        client: grpcclient.InferenceServerClient,
        address: Address,
        timeout_s: float,
    ) -> dict[str, np.ndarray]:
        # shared memory only on an admitted address: one the pool calls while none is healthy may be a
        # restarted server that knows none of the regions registered before
        if self.pool is not None and address.state is State.HEALTHY:
            sizes = call.output_bytes(inputs)
            if sizes is not None:
                return await self._call_shared(call, inputs, self.pool, sizes, client, timeout_s)
        # no await between fill() and infer(): the request is serialised before another call refills
        response = await client.infer(
            call.name, call.fill(inputs), outputs=call.outputs, client_timeout=timeout_s
        )
        return call.read_payload(response)

    async def _call_shared(
        self,
        call: ModelCall,
        inputs: dict[str, np.ndarray],
        pool: RegionPool,
        sizes: list[int],
        client: grpcclient.InferenceServerClient,
        timeout_s: float,
    ) -> dict[str, np.ndarray]:
        region = await pool.lease(call.shared_bytes(inputs, sizes))
        done = False
        try:
            filled, outputs, offsets = call.fill_shared(inputs, region, sizes)
            response = await client.infer(call.name, filled, outputs=outputs, client_timeout=timeout_s)
            result = call.read_shared(response, region, offsets)
            done = True
            return result
        finally:
            # after an error or a cancellation the server may still write into the region: never reuse it
            await (pool.release(region) if done else pool.discard(region))

    def _count(self, model: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.backend_errors.labels(model=model, reason=reason).inc()

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        await self.servers.close()


def _channel_args() -> list[tuple[str, int]]:
    """tritonclient's defaults (no message size limit, its keepalive settings) with short reconnect
    backoff, so a gateway that started before its server notices it within a second."""
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(keepalive.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]


def _rows(inputs: dict[str, np.ndarray]) -> int:
    """The batch size of per-image model inputs (0 if there are none or they are scalars)."""
    sizes = {v.shape[0] for v in inputs.values() if isinstance(v, np.ndarray) and v.ndim > 0}
    return max(sizes, default=0)


async def build(settings: Any, manifest: Manifest, metrics: Metrics) -> Backend:
    """The Triton backend of the engine's ``settings`` (the registry's ``triton`` record), connected
    (``TritonBackend.connect``); at
    another precision than fp32 its calls go to the variants' model names (``ServedNames``)."""
    connected = await TritonBackend.connect(
        settings.triton_url,
        manifest,
        metrics,
        timeout_s=settings.triton_startup_s,
        shared_memory=settings.triton_shared_memory,
        repo=settings.repo,
        resolve_s=settings.triton_resolve_s,
    )
    if settings.precision == "fp32":
        return connected
    return ServedNames(connected, manifest.served_models(settings.precision), settings.precision)
