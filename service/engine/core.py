"""The engine core: one process per device that holds the models and the schedulers, and captions for
any number of API processes (``compcap serve --api-processes N``) over a Unix-domain socket
(``service.engine.wire``; the client side is ``service.engine.core_client.RemoteEngine``).

Each connection is one API process. A ``Submit`` becomes one ``CaptionEngine.caption`` call (its
options resolved again here, hooks included), run as a task of its own so that requests of every
connection share the schedulers' step calls; its answer is a ``Done`` or a ``Failed``, preceded by
``Step`` messages when it asked to ``observe``. A ``Cancel``, or the connection closing, cancels the
request's task (the scheduler frees its rows). On SIGTERM the core stops accepting, lets the requests
in flight finish (bounded by the request deadline), and exits. It runs in a session of its own, so
that a signal to the whole process group (a terminal's Ctrl-C) reaches the API processes, which drain
first, and not the core, which the parent stops after them; it exits by itself if its parent dies.

``python -m service.engine.core`` runs one, with the ``COMPCAP_*`` settings and ``COMPCAP_ENGINE_SOCKET``
the path to listen on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import astuple
from pathlib import Path

from service.backends.base import BackendError
from service.engine.deadlines import base_deadline_s
from service.engine.engine import CaptionEngine, CaptionOutput
from service.engine.observer import StepEvent
from service.engine.params import EngineError, OverloadedError, UnknownModelError
from service.engine.request import Priority
from service.engine.settings import CoreSettings
from service.engine.wire import (
    Cancel,
    Done,
    Failed,
    Hello,
    Reload,
    Reloaded,
    Step,
    Submit,
    WireCaption,
    frame,
    pack,
    read_message,
    unpack,
)
from service.manifest import load_manifest, repo_version, same_models
from service.metrics import Metrics
from service.sections import load

log = logging.getLogger(__name__)


def failure(request_id: int, exc: BaseException) -> Failed:
    """``exc`` as a ``Failed`` message the client turns back into the same kind of exception."""
    if isinstance(exc, OverloadedError):
        return Failed(request_id, "overloaded", exc.message, exc.field, exc.retry_after_s)
    if isinstance(exc, UnknownModelError):
        return Failed(request_id, "unknown_model", exc.message, exc.field)
    if isinstance(exc, EngineError):
        return Failed(request_id, "invalid_parameter", exc.message, exc.field)
    if isinstance(exc, TimeoutError):
        return Failed(request_id, "timeout", str(exc) or "deadline exceeded")
    if isinstance(exc, BackendError):
        return Failed(request_id, "backend", str(exc), f"{exc.model}:{exc.reason}")
    if isinstance(exc, ValueError):
        return Failed(request_id, "bad_request", str(exc))
    return Failed(request_id, "internal", f"{type(exc).__name__}: {exc}")


def event_fields(event: StepEvent) -> dict[str, object]:
    """A ``StepEvent``'s arrays as wire arrays (``attention`` left out when the step had none)."""
    fields = {name: getattr(event, name) for name in StepEvent.__dataclass_fields__}
    return {name: pack(value) for name, value in fields.items() if value is not None}


def done(request_id: int, out: CaptionOutput) -> Done:
    results: list[list[WireCaption]] = [[astuple(c) for c in per] for per in out.results]
    return Done(request_id, results, dict(out.timings_ms), out.iterations, out.domain)


class EngineCore:
    """Serves ``engine`` to API processes over a Unix-domain socket (see module docstring)."""

    def __init__(
        self,
        engine: CaptionEngine,
        backend: str,
        devices: Mapping[str, str],
        settings: CoreSettings | None = None,
        version: str = "",
    ) -> None:
        """``settings``: what a ``Reload`` loads the repository with again (None: the core never
        reloads); ``version``: the repository version ``engine`` was loaded from."""
        self.engine = engine
        self.hello = Hello(os.getpid(), backend, dict(devices))
        self.settings = settings
        self.version = version
        self.generation = 0  # the last reload asked of every replica that this core acted on
        self.connections = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._reload_lock = asyncio.Lock()

    async def start(self, path: Path) -> None:
        """Listen on ``path`` (a socket file only this user may open)."""
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = await asyncio.start_unix_server(self._connection, path=str(path))
        os.chmod(path, 0o600)

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting; wait up to ``timeout_s`` for the requests in flight, then cancel the rest
        and close the connections."""
        if self._server is not None:
            self._server.close()
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for writer in list(self._writers):
            writer.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        running: dict[int, asyncio.Task[None]] = {}
        writer.write(frame(self.hello))
        try:
            while (message := await read_message(reader)) is not None:
                if isinstance(message, Submit):
                    task = asyncio.create_task(self._caption(message, writer))
                    running[message.id] = task
                    self._tasks.add(task)
                    task.add_done_callback(functools.partial(self._finished, running, message.id))
                elif isinstance(message, Cancel):
                    if (found := running.get(message.id)) is not None:
                        found.cancel()
                elif isinstance(message, Reload):
                    task = asyncio.create_task(self._reload(message, writer))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    raise ValueError(f"an API process sent a {type(message).__name__}")
        except (ValueError, ConnectionError) as exc:
            log.warning("dropping an API process connection: %s", exc)
        except asyncio.CancelledError:
            pass  # the core is shutting down
        finally:
            self.connections -= 1
            self._writers.discard(writer)
            for task in list(running.values()):  # its client is gone: nobody reads the answers
                task.cancel()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _finished(self, running: dict[int, asyncio.Task[None]], key: int, task: asyncio.Task[None]) -> None:
        running.pop(key, None)
        self._tasks.discard(task)

    async def _caption(self, message: Submit, writer: asyncio.StreamWriter) -> None:
        def observe(event: StepEvent) -> None:
            if not writer.is_closing():
                writer.write(frame(Step(message.id, event_fields(event))))  # type: ignore[arg-type]

        engine = self.engine  # a reload while it runs leaves it on the models it started with
        try:
            params = engine.resolve(**message.options)
            out = await engine.caption(
                unpack(message.images),
                params,
                timeout_s=message.timeout_s,
                priority=Priority(message.priority),
                observer=observe if message.observe else None,
            )
            reply: Done | Failed = done(message.id, out)
        except asyncio.CancelledError:
            return  # cancelled by its client (or its connection closed): nobody waits for an answer
        except Exception as exc:
            if not isinstance(exc, EngineError | TimeoutError | ValueError):
                log.exception("request %d failed in the engine core", message.id)
            reply = failure(message.id, exc)
        if not writer.is_closing():
            writer.write(frame(reply))
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    async def _reload(self, message: Reload, writer: asyncio.StreamWriter) -> None:
        try:
            reply: Reloaded | Failed = await self.reload(message.id, message.force, message.generation)
        except Exception as exc:
            log.exception("reloading the repository failed; serving the models loaded before")
            reply = failure(message.id, exc)
        if not writer.is_closing():
            writer.write(frame(reply))
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    async def reload(self, request_id: int, force: bool = False, generation: int = 0) -> Reloaded:
        """Load the repository again when its version changed since the core loaded it, or when
        ``force`` comes with a ``generation`` newer than the last acted on (every API process asks; one
        load serves them all). New requests go to the new engine; those in flight finish on the old."""
        async with self._reload_lock:
            if self.settings is None:
                raise ValueError("this engine core was started without settings: it cannot reload")
            repo = self.settings.repo
            version = await asyncio.to_thread(repo_version, repo)
            forced = force and generation > self.generation
            self.generation = max(self.generation, generation) if force else self.generation
            if version == self.version and not forced:
                return Reloaded(request_id, version, False)
            manifest = await asyncio.to_thread(load_manifest, repo)
            if not forced and same_models(manifest, self.engine.manifest):
                self.version = version  # other probe sets: nothing the core serves
                return Reloaded(request_id, version, False)
            from service.backends.base import backend_devices

            engine = await CaptionEngine.from_settings(self.settings, self.engine.metrics or Metrics())
            old, self.engine, self.version = self.engine, engine, version
            self.hello = Hello(os.getpid(), self.hello.backend, dict(backend_devices(engine.backend)))
            old.retire()
            log.info("engine core %d: repository %s loaded again (version %s)", os.getpid(), repo, version)
            return Reloaded(request_id, version, True)


async def run_core(path: Path) -> None:
    """Load the models as the ``COMPCAP_*`` settings say, serve them on ``path`` until SIGTERM."""
    from service.backends.base import backend_devices

    settings = load(CoreSettings)  # the HTTP process that started the core validated the rest
    version = repo_version(settings.repo)  # before the load: a change during it is seen at the next reload
    engine = await CaptionEngine.from_settings(settings, Metrics())
    core = EngineCore(engine, settings.backend, backend_devices(engine.backend), settings, version)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await core.start(path)
    log.info("engine core %d serving on %s", os.getpid(), path)
    orphaned = asyncio.create_task(_parent_gone(os.getppid(), stop))
    try:
        await stop.wait()
        log.info("engine core %d draining", os.getpid())
        await core.drain(base_deadline_s(settings))
    finally:
        orphaned.cancel()
        await engine.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


async def _parent_gone(parent: int, stop: asyncio.Event, every_s: float = 1.0) -> None:
    """Set ``stop`` once the process that started the core is gone (it was killed: nobody else will)."""
    while os.getppid() == parent:
        await asyncio.sleep(every_s)
    log.warning("engine core %d: its parent %d is gone; stopping", os.getpid(), parent)
    stop.set()


def main() -> int:
    from service.logs import LogSettings, configure_logging

    logs = load(LogSettings)
    configure_logging(logs.log_format, logs.log_level)
    path = os.environ.get("COMPCAP_ENGINE_SOCKET")
    if not path:
        log.error("COMPCAP_ENGINE_SOCKET is not set: the path of the socket to listen on")
        return 2
    import uvloop

    uvloop.run(run_core(Path(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
