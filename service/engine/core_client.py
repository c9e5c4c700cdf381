"""``RemoteEngine``: an ``EngineClient`` whose engine core runs in another process
(``service.engine.core``), reached over its Unix-domain socket with ``service.engine.wire`` messages.

One connection per API process, kept open and re-opened by itself: while the core is down (it died
and its supervisor restarts it, or it is still loading its models) a caption fails at once with
``BackendError(reason="unavailable")`` — the gateway's 503 ``backend_unavailable`` with
``Retry-After`` — never waits; the requests in flight when the connection drops fail the same way.
A request is sent as its resolved options (``SearchParams.options()``); its answer comes back as the
``CaptionOutput`` the in-process engine returns. A request's own deadline is kept on this side too:
if no answer came within its timeout (plus a second for the core's own), it is cancelled there and
fails with ``TimeoutError``; a request cancelled here (its client left) is cancelled there.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.backends.base import BackendError
from service.engine.client import CaptionOutput, Checked, EngineClient
from service.engine.observer import StepEvent, StepObserver
from service.engine.params import (
    InvalidParameterError,
    OverloadedError,
    UnknownModelError,
)
from service.engine.rerank import Caption
from service.engine.settings import EngineSettings
from service.engine.tokens import captioner_vocabularies
from service.engine.wire import (
    Cancel,
    Done,
    Failed,
    Hello,
    Message,
    Reload,
    Reloaded,
    Step,
    Submit,
    frame,
    pack,
    read_message,
    unpack,
)
from service.manifest import Manifest
from service.text.vocabulary import Vocabulary

log = logging.getLogger(__name__)

CORE = "engine_core"  # the "model" a BackendError names when the core cannot be reached
RECONNECT_S = (0.05, 1.0)  # first and longest wait between attempts to reach the core
GRACE_S = 1.0  # the core answers a request's timeout itself; this side waits that much longer


def raised(message: Failed) -> Exception:
    """The exception a ``Failed`` message stands for (the core's ``failure`` in reverse)."""
    if message.kind == "overloaded":
        return OverloadedError(message.retry_after_s or 1.0)
    if message.kind == "unknown_model":
        return UnknownModelError(message.field or "model", message.message)
    if message.kind == "invalid_parameter":
        return InvalidParameterError(message.field or "request", message.message)
    if message.kind == "timeout":
        return TimeoutError(message.message)
    if message.kind == "backend":
        model, _, reason = (message.field or f"{CORE}:runtime").partition(":")
        error = BackendError(model, reason or "runtime", message.message)
        error.args = (message.message,)  # the core's text already names the model
        return error
    if message.kind == "bad_request":
        return ValueError(message.message)
    return RuntimeError(f"engine core: {message.message}")


def step_event(message: Step) -> StepEvent:
    fields: dict[str, Any] = {name: unpack(value) for name, value in message.fields.items()}
    fields.setdefault("attention", None)
    return StepEvent(**fields)


@dataclass
class _Pending:
    future: asyncio.Future[Any]  # a Done, or a Reloaded for a Reload
    observer: StepObserver | None


class RemoteEngine(EngineClient):
    """``EngineClient`` of an engine core at ``path`` (see module docstring). ``connected`` says
    whether the core answers now; ``devices`` and ``backend`` are what it said when it did;
    ``on_connected(bool)`` is called as that changes (the gateway's ``compcap_ready`` gauge)."""

    def __init__(
        self,
        path: str | Path,
        manifest: Manifest,
        vocab: Vocabulary,
        settings: EngineSettings,
        on_connected: Callable[[bool], object] | None = None,
    ) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self.settings = EngineSettings.of(settings)
        self.vocabs = captioner_vocabularies(self.settings.repo, manifest, vocab)
        self.devices: dict[str, str] = {}
        self.backend = ""
        self.core_pid: int | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._connected = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._on_connected = on_connected

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def start(self) -> None:
        """Start keeping the connection (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._keep_connected())

    async def wait_connected(self, timeout_s: float) -> bool:
        """Whether the core answered within ``timeout_s``."""
        self.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        return self.connected

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._drop(BackendError(CORE, "unavailable", "the API process is shutting down"))

    # -- the engine's API -------------------------------------------------------------------------

    async def _submit(self, request: Checked) -> CaptionOutput:
        """``caption`` (``EngineClient``) of a checked request: one frame to the core, its answer."""
        images, params, timeout, priority, observer = request
        options = params.options()
        writer, key, future = self._request(observer)
        try:
            writer.write(
                frame(Submit(key, pack(images), options, timeout, int(priority), observer is not None))
            )
            try:
                async with asyncio.timeout(timeout + GRACE_S):  # no task of its own, unlike wait_for
                    answer: Done = await future
            except TimeoutError:
                self._cancel(key)
                raise TimeoutError(f"no answer from the engine core within {timeout:.0f} s") from None
            except asyncio.CancelledError:
                self._cancel(key)
                raise
        finally:
            self._pending.pop(key, None)
        results = [[Caption(*c) for c in per] for per in answer.results]
        domain = None if answer.domain is None else (list(answer.domain[0]), list(answer.domain[1]))
        return CaptionOutput(params, results, dict(answer.timings_ms), answer.iterations, domain)

    async def reload(self, force: bool = False, generation: int = 0, timeout_s: float = 600.0) -> Reloaded:
        """Ask the core to load the repository again (``wire.Reload``); its answer, once it serves the
        new version. ``BackendError`` while the core is away; the core's error when it could not load
        it (it goes on serving the old one)."""
        writer, key, future = self._request(None)
        try:
            writer.write(frame(Reload(key, force, generation)))
            async with asyncio.timeout(timeout_s):
                return await future
        finally:
            self._pending.pop(key, None)

    def use(self, manifest: Manifest, vocab: Vocabulary) -> None:
        """Resolve and check requests against ``manifest`` from now on (the core serves it)."""
        self.vocabs = captioner_vocabularies(self.settings.repo, manifest, vocab)
        self.manifest = manifest

    # -- the connection ---------------------------------------------------------------------------

    def _request(
        self, observer: StepObserver | None
    ) -> tuple[asyncio.StreamWriter, int, asyncio.Future[Any]]:
        """A new request's writer, key and future (waiting in ``_pending`` for the core's answer: a
        ``Done``, or a ``Reloaded`` for a ``Reload``); ``BackendError`` while the core is away."""
        writer = self._writer
        if writer is None or not self.connected or writer.is_closing():
            raise BackendError(CORE, "unavailable", "the engine core is not running; retry shortly")
        key = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[key] = _Pending(future, observer)
        return writer, key, future

    def _cancel(self, key: int) -> None:
        writer = self._writer
        if writer is not None and not writer.is_closing():
            writer.write(frame(Cancel(key)))

    def _drop(self, error: Exception) -> None:
        """Fail every request waiting for an answer (the connection is gone)."""
        if self._connected.is_set() and self._on_connected is not None:
            self._on_connected(False)
        self._connected.clear()
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(error)

    async def _keep_connected(self) -> None:
        wait = RECONNECT_S[0]
        while not self._closing:
            try:
                reader, writer = await asyncio.open_unix_connection(str(self.path))
            except (FileNotFoundError, ConnectionError, OSError):
                await asyncio.sleep(wait)
                wait = min(RECONNECT_S[1], wait * 2)
                continue
            wait = RECONNECT_S[0]
            try:
                await self._read(reader, writer)
            except (ValueError, ConnectionError) as exc:
                log.warning("engine core connection lost: %s", exc)
            finally:
                self._writer = None
                writer.close()
                self._drop(BackendError(CORE, "unavailable", "the engine core went away; retry shortly"))
            if not self._closing:
                log.warning("engine core at %s is gone; reconnecting", self.path)

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await read_message(reader)
        if not isinstance(first, Hello):
            raise ValueError("the engine core did not say hello")
        self.devices, self.backend, self.core_pid = dict(first.devices), first.backend, first.pid
        self._writer = writer
        self._connected.set()
        if self._on_connected is not None:
            self._on_connected(True)
        log.info("connected to engine core %d at %s", first.pid, self.path)
        while (message := await read_message(reader)) is not None:
            self._dispatch(message)

    def _dispatch(self, message: Message) -> None:
        if not isinstance(message, Done | Failed | Step | Reloaded):
            raise ValueError(f"the engine core sent a {type(message).__name__}")
        entry = self._pending.get(message.id)
        if entry is None or entry.future.done():
            return  # cancelled here already
        if isinstance(message, Step):
            if entry.observer is not None:
                try:
                    entry.observer(step_event(message))
                except Exception as exc:  # an observer that raises fails its own request only
                    entry.future.set_exception(exc)
                    self._cancel(message.id)
            return
        if isinstance(message, Done | Reloaded):
            entry.future.set_result(message)
        else:
            entry.future.set_exception(raised(message))


__all__ = ["CORE", "RemoteEngine"]
