"""The Triton backend's servers at run time: one gRPC client per address of ``COMPCAP_TRITON_URL`` (a
``dns:///`` name resolved again every ``resolve_s``: new servers join, gone ones leave), a background task
that probes new and ejected addresses (server and models ready, models the manifest's) before they get
calls, and ``call``, which runs one model call on a picked address and, when that address went away,
once more on another within the call's time budget. The states and the picking are
``addresses.AddressSet``; ``compcap_triton_addresses{state}`` counts the addresses per state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import tritonclient.grpc.aio as grpcclient
from prometheus_client import CollectorRegistry, Counter, Gauge
from tritonclient.utils import InferenceServerException

from service.backends.base import BackendError
from service.backends.triton.addresses import (
    DIGEST_PARAMETER,
    Address,
    AddressSet,
    ModelIdentity,
    State,
    identity_problems,
    is_address_failure,
    latest_version,
)
from service.backends.triton.url import Target, join_hostport
from service.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")
Attempt = Callable[[grpcclient.InferenceServerClient, Address, float], Awaitable[T]]

PROBE_TIMEOUT_S = 2.0  # each health or metadata call of a probe
READY_POLL_S = 0.2  # start-up: how often addresses are probed until one is healthy
MAX_WAIT_S = 1.0  # the maintenance loop looks at the addresses at least this often
ADDRESSES = "compcap_triton_addresses"
EJECTIONS = "compcap_triton_ejections"
RETRIES = "compcap_triton_retries"


class PoolMetrics:
    """The pool's metrics on a gateway's registry (registered once per registry)."""

    _made: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, PoolMetrics]] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.addresses = Gauge(
            ADDRESSES,
            "Triton addresses by state (healthy, ejected, mismatched, pending)",
            ["state"],
            registry=registry,
        )
        self.ejections = Counter(EJECTIONS, "Triton addresses ejected after a failed call", registry=registry)
        self.retries = Counter(
            RETRIES, "Model calls retried on another address, by outcome", ["outcome"], registry=registry
        )

    @classmethod
    def of(cls, metrics: Metrics | None) -> PoolMetrics | None:
        if metrics is None:
            return None
        made = cls._made.get(metrics.registry)
        if made is None:
            made = cls._made[metrics.registry] = cls(metrics.registry)
        return made


def served_identity(metadata: Any, config: Any) -> ModelIdentity:
    """The identity of a served model from its ``ModelMetadataResponse`` and ``ModelConfig``."""
    tensors = frozenset((t.name, t.datatype, tuple(t.shape)) for t in [*metadata.inputs, *metadata.outputs])
    digest = (
        config.parameters[DIGEST_PARAMETER].string_value if DIGEST_PARAMETER in config.parameters else None
    )
    return ModelIdentity(
        latest_version(metadata.versions), int(config.max_batch_size), tensors, digest or None
    )


# ModelInstanceGroup.Kind (model_config.proto) -> where the instances run; Triton's served config has
# KIND_AUTO resolved to GPU or CPU
_KINDS = {1: "cuda", 2: "cpu", 3: "model"}


def instance_device(config: Any) -> str:
    """Where a served model's instances run, from its ``ModelConfig`` (``cuda``, ``cpu``; kinds joined
    by ``+`` where its groups differ; ``auto`` where the server left it unresolved)."""
    kinds = sorted({_KINDS.get(int(group.kind), "auto") for group in config.instance_group})
    return "+".join(kinds) or "auto"


class TritonPool:
    """The addresses of ``target`` with one client each. ``start`` waits for a healthy one and starts the
    maintenance task; ``close`` ends it and closes every client."""

    def __init__(
        self,
        target: Target,
        expected: dict[str, ModelIdentity],
        channel_args: list[tuple[str, int]],
        metrics: Metrics | None = None,
        resolve_s: float = 10.0,
    ) -> None:
        self.target = target
        self.expected = expected
        self.channel_args = channel_args
        self.resolve_s = resolve_s
        self.metrics = PoolMetrics.of(metrics)
        self.addresses = AddressSet()
        self.clients: dict[str, grpcclient.InferenceServerClient] = {}
        self.on_readmit: Callable[[Address], Awaitable[None]] | None = None
        self._retired: list[tuple[Address, grpcclient.InferenceServerClient]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._resolve_error = ""
        self._logged: dict[str, str] = {}
        self._unverified: dict[str, list[str]] = {}  # models whose server publishes no sha256
        self._kinds: dict[str, dict[str, str]] = {}  # address -> model -> device of its instances
        if target.kind != "dns":
            self._set(target.addresses)

    @property
    def devices(self) -> dict[str, str]:
        """Model -> the device of its instances on the healthy addresses (kinds joined by ``+`` where
        addresses differ)."""
        found: dict[str, set[str]] = {}
        for address in self.addresses.healthy():
            for model, kind in self._kinds.get(address.url, {}).items():
                found.setdefault(model, set()).add(kind)
        return {model: "+".join(sorted(kinds)) for model, kinds in found.items()}

    # --- addresses ---------------------------------------------------------------------------------

    def _set(self, urls: list[str] | tuple[str, ...]) -> None:
        joined, left = self.addresses.update(urls)
        for address in joined:
            self.clients[address.url] = grpcclient.InferenceServerClient(
                address.url, channel_args=self.channel_args
            )
            if self.target.kind == "dns":
                log.info("triton address %s joined %s", address.url, self.target)
        for address in left:
            log.info("triton address %s left %s", address.url, self.target)
            self._retired.append((address, self.clients.pop(address.url)))
        if joined or left:
            self._publish()

    async def resolve(self) -> None:
        """Resolve the DNS name again; on failure keep the addresses known so far."""
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                self.target.host, self.target.port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            message = f"cannot resolve {self.target.host}: {exc}"
            if message != self._resolve_error:
                log.warning("triton %s: %s; keeping %d addresses", self.target, message, len(self.addresses))
            self._resolve_error = message
            return
        self._resolve_error = ""
        urls = sorted({join_hostport(str(info[4][0]), int(info[4][1])) for info in infos})
        if urls:
            self._set(urls)

    async def _close_retired(self) -> None:
        keep = []
        for address, client in self._retired:
            if address.outstanding > 0:
                keep.append((address, client))
            else:
                await client.close()
        self._retired = keep

    # --- probes ------------------------------------------------------------------------------------

    async def probe(self, address: Address, retry_s: float | None = None) -> None:
        """Check ``address`` and make it healthy, mismatched or ejected (until ``retry_s`` from now, by
        default its back-off)."""
        client = self.clients.get(address.url)
        if client is None:
            return
        was = address.state
        try:
            problem, mismatches = await self._check(client, address)
        except InferenceServerException as exc:
            problem, mismatches = exc.message() or str(exc), []
        except Exception as exc:  # whatever fails, the address is not healthy
            problem, mismatches = f"{type(exc).__name__}: {exc}", []
        if mismatches:
            self.addresses.mismatch(address, "; ".join(mismatches))
        elif problem:
            self.addresses.fail_probe(address, problem, retry_s)
        else:
            self.addresses.admit(address)
            if address.admissions > 1 and self.on_readmit is not None:
                await self.on_readmit(address)
        if address.state is not was or self._logged.get(address.url) != address.reason:
            self._log_state(address)
            self._publish()

    async def _check(
        self, client: grpcclient.InferenceServerClient, address: Address
    ) -> tuple[str, list[str]]:
        """('', []) for a ready server serving the manifest's models; else what is not ready, or why
        its models are not the manifest's. Notes the models whose weights it could not compare."""
        if not await client.is_server_ready(client_timeout=PROBE_TIMEOUT_S):
            return "server not ready", []
        names = list(self.expected)
        ready = await asyncio.gather(
            *(client.is_model_ready(n, client_timeout=PROBE_TIMEOUT_S) for n in names)
        )
        pending = [name for name, ok in zip(names, ready, strict=True) if not ok]
        if pending:
            return f"models not ready: {pending}", []
        problems, unverified = [], []
        kinds: dict[str, str] = {}
        for name, expected in self.expected.items():
            metadata, config = await asyncio.gather(
                client.get_model_metadata(name, client_timeout=PROBE_TIMEOUT_S),
                client.get_model_config(name, client_timeout=PROBE_TIMEOUT_S),
            )
            served = served_identity(metadata, config.config)
            kinds[name] = instance_device(config.config)
            problems += [f"{name}: {p}" for p in identity_problems(expected, served)]
            if expected.digest and not served.digest:
                unverified.append(name)
        self._unverified[address.url] = unverified
        self._kinds[address.url] = kinds
        return "", problems

    def _log_state(self, address: Address) -> None:
        self._logged[address.url] = address.reason
        if address.state is State.HEALTHY:
            unverified = self._unverified.get(address.url) or []
            log.info(
                "triton address %s healthy (%d healthy of %d)%s",
                address.url,
                len(self.addresses.healthy()),
                len(self.addresses),
                f"; weights not compared for {unverified}: no {DIGEST_PARAMETER} in their served config"
                if unverified
                else "",
            )
        elif address.state is State.MISMATCHED:
            log.error(
                "triton address %s gets no calls: its models are not the manifest's: %s",
                address.url,
                address.reason,
            )
        else:
            log.warning("triton address %s %s: %s", address.url, address.state.value, address.reason)

    def _publish(self) -> None:
        if self.metrics is not None:
            for state, count in self.addresses.counts().items():
                self.metrics.addresses.labels(state=state).set(count)

    # --- life cycle --------------------------------------------------------------------------------

    async def start(self, timeout_s: float) -> None:
        """Probe every address each ``READY_POLL_S`` until one is healthy (a single address that serves
        other models fails at once), then keep the set up to date in the background. ``BackendError``
        ``unavailable`` (``runtime`` for models not the manifest's) past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        resolved = -float("inf")
        while True:
            if self.target.kind == "dns" and time.monotonic() - resolved >= min(self.resolve_s, 1.0):
                await self.resolve()
                resolved = time.monotonic()
            waiting = [a for a in self.addresses if a.state is not State.HEALTHY]
            await asyncio.gather(*(self.probe(a, retry_s=0.0) for a in waiting))
            if self.addresses.healthy():
                break
            mismatched = [a for a in self.addresses if a.state is State.MISMATCHED]
            single_mismatch = self.target.kind == "single" and mismatched
            if single_mismatch or time.monotonic() > deadline:
                reason = "runtime" if mismatched else "unavailable"
                problem = self._resolve_error or self.addresses.summary()
                raise BackendError("*", reason, f"no Triton address ready after {timeout_s:.0f} s: {problem}")
            await asyncio.sleep(READY_POLL_S)
        for address in self.addresses:  # the rest are probed soon, with their back-off from now on
            address.retry_at = min(address.retry_at, time.monotonic())
        self._task = asyncio.create_task(self._maintain(), name="triton-pool")

    async def _maintain(self) -> None:
        next_resolve = time.monotonic() + self.resolve_s
        while True:
            try:
                if self.target.kind == "dns" and time.monotonic() >= next_resolve:
                    await self.resolve()
                    next_resolve = time.monotonic() + self.resolve_s
                await asyncio.gather(*(self.probe(a) for a in self.addresses.due()))
                await self._close_retired()
                wait = self._wait_s(next_resolve if self.target.kind == "dns" else None)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):  # not wait_for: 3.11's can lose a cancellation
                        await self._wake.wait()
                self._wake.clear()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the maintenance: log it and go on
                log.exception("triton pool maintenance failed")
                await asyncio.sleep(MAX_WAIT_S)

    def _wait_s(self, next_resolve: float | None) -> float:
        """Seconds until the next probe or resolution is due (at least 10 ms, at most ``MAX_WAIT_S``)."""
        times = [t for t in (self.addresses.next_due(), next_resolve) if t is not None]
        wake_at = min(times, default=time.monotonic() + MAX_WAIT_S)
        return min(max(wake_at - time.monotonic(), 0.01), MAX_WAIT_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        clients = [*self.clients.values(), *(client for _, client in self._retired)]
        self.clients, self._retired = {}, []
        for client in clients:
            await client.close()

    # --- calls -------------------------------------------------------------------------------------

    async def call(self, model: str, attempt: Attempt[T], timeout_s: float) -> T:
        """``attempt(client, address, seconds_left)`` on a picked address; when it fails because the
        address went away (``is_address_failure``), the address is ejected and the call made once more on
        another, with what is left of ``timeout_s``. Other failures are raised as they are."""
        start = time.monotonic()
        tried: list[str] = []
        while True:
            address = self.addresses.pick(exclude=tried)
            if address is None:
                raise BackendError(
                    model, "unavailable", f"no healthy Triton address: {self.addresses.summary()}"
                )
            left_s = timeout_s - (time.monotonic() - start)
            if left_s <= 0:
                raise BackendError(model, "unavailable", f"no time left to retry after {tried[-1]} failed")
            address.outstanding += 1
            try:
                result = await attempt(self.clients[address.url], address, left_s)
            except InferenceServerException as exc:
                if not is_address_failure(str(exc.status())):
                    raise
                self._failed(address, exc)
                tried.append(address.url)
                if len(tried) > 1 or self.addresses.pick(exclude=tried) is None:
                    if len(tried) > 1 and self.metrics is not None:
                        self.metrics.retries.labels(outcome="failed").inc()
                    raise
                log.debug(
                    "%s: retrying on another address after %s failed: %s", model, address.url, exc.message()
                )
                continue
            finally:
                address.outstanding -= 1
            if self.addresses.succeed_call(address):
                self._wake.set()
            if tried and self.metrics is not None:
                self.metrics.retries.labels(outcome="served").inc()
            return result

    def _failed(self, address: Address, exc: InferenceServerException) -> None:
        if self.addresses.fail_call(address, f"{exc.status()}: {exc.message()}"):
            self._log_state(address)
            self._publish()
            if self.metrics is not None:
                self.metrics.ejections.inc()
            self._wake.set()
