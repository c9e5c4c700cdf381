"""Triton backend: the repository's models served by a Triton Inference Server, called over gRPC
(``tritonclient.grpc.aio``), tensors in the request payload or, for a co-located server, in system
shared memory. Build it with ``await TritonBackend.connect(url, manifest, metrics)``, which waits
(bounded) until the server and every model of the manifest are ready and checks that the served
tensors match the manifest."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException
from tritonclient.utils.shared_memory import SharedMemoryException

from service.backends.base import BackendError
from service.backends.triton_request import ModelCall
from service.backends.triton_shm import RegionPool
from service.manifest import Manifest
from service.metrics import Metrics

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.2
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
    """Runs ``infer`` calls on a Triton server over gRPC. Per-image models (``max_batch_size > 0``) are
    split into chunks of at most ``max_batch_size`` items, sent concurrently and concatenated, so
    callers may batch as freely as with the embedded backend. ``shared_memory`` sends tensors through
    system shared memory (the server must share this host's ``/dev/shm``)."""

    def __init__(
        self,
        url: str,
        manifest: Manifest,
        metrics: Metrics | None = None,
        shared_memory: bool = False,
        call_timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.metrics = metrics
        self.call_timeout_s = call_timeout_s
        self.client = grpcclient.InferenceServerClient(url, channel_args=_channel_args())
        self.calls = {entry.name: ModelCall(entry) for entry in manifest.models}
        self.pool = RegionPool(self.client, call_timeout_s) if shared_memory else None

    @classmethod
    async def connect(
        cls,
        url: str,
        manifest: Manifest,
        metrics: Metrics | None = None,
        timeout_s: float = READY_TIMEOUT_S,
        shared_memory: bool = False,
    ) -> TritonBackend:
        """A backend whose server and models are ready (``BackendError`` reason ``unavailable`` if not
        within ``timeout_s``) and serve the manifest's tensors."""
        backend = cls(url, manifest, metrics, shared_memory)
        try:
            await backend.wait_ready(timeout_s)
            await backend.check_models()
        except BaseException:
            await backend.close()
            raise
        log.info(
            "triton backend: %d models at %s, tensors %s",
            len(backend.calls),
            url,
            "in shared memory" if shared_memory else "over gRPC",
        )
        return backend

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(self.calls)
        problem = "server not ready"
        while True:
            try:
                if await self.client.is_server_ready(client_timeout=2.0):
                    ready = await asyncio.gather(
                        *(self.client.is_model_ready(name, client_timeout=2.0) for name in pending)
                    )
                    pending = [name for name, ok in zip(pending, ready, strict=True) if not ok]
                    if not pending:
                        return
                    problem = f"models not ready: {pending}"
            except InferenceServerException as exc:
                problem = exc.message() or str(exc)
            if time.monotonic() > deadline:
                raise BackendError(
                    "*", "unavailable", f"Triton at {self.url} not ready after {timeout_s:.0f} s: {problem}"
                )
            await asyncio.sleep(READY_POLL_S)

    async def check_models(self) -> None:
        """The served inputs and outputs (names, datatypes, dims) are the manifest's."""
        for name, call in self.calls.items():
            meta = await self.client.get_model_metadata(name)
            served = {(t.name, t.datatype, tuple(t.shape)) for t in [*meta.inputs, *meta.outputs]}
            batch = (-1,) if call.max_batch > 0 else ()
            expected = {
                (t.name, t.dtype, (*batch, *t.dims)) for t in [*call.entry.inputs, *call.entry.outputs]
            }
            if served != expected:
                raise BackendError(
                    name, "runtime", f"Triton serves {sorted(served)}, the manifest says {sorted(expected)}"
                )

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        call = self.calls.get(model)
        if call is None:
            self._count(model, "unknown_model")
            raise BackendError(model, "unknown_model", "no such model in the repository")
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
            if self.pool is not None:
                sizes = call.output_bytes(inputs)
                if sizes is not None:
                    return await self._call_shared(call, inputs, self.pool, sizes)
            # no await between fill() and infer(): the request is serialised before another call refills
            response = await self.client.infer(
                call.name, call.fill(inputs), outputs=call.outputs, client_timeout=self.call_timeout_s
            )
            return call.read_payload(response)
        except ValueError as exc:
            raise BackendError(call.name, "bad_input", str(exc)) from exc
        except InferenceServerException as exc:
            raise BackendError(call.name, reason_of(exc), exc.message() or str(exc)) from exc
        except (RuntimeError, OSError, SharedMemoryException) as exc:
            raise BackendError(call.name, "runtime", str(exc)) from exc

    async def _call_shared(
        self, call: ModelCall, inputs: dict[str, np.ndarray], pool: RegionPool, sizes: list[int]
    ) -> dict[str, np.ndarray]:
        region = await pool.lease(call.shared_bytes(inputs, sizes))
        done = False
        try:
            filled, outputs, offsets = call.fill_shared(inputs, region, sizes)
            response = await self.client.infer(
                call.name, filled, outputs=outputs, client_timeout=self.call_timeout_s
            )
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
        await self.client.close()


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
