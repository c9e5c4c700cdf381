"""``compcap serve --api-processes N``: N HTTP processes on one port and one engine core.

    parent ── supervises ──► engine core (python -m service.engine.core): models, schedulers
       │                        ▲ Unix socket, service.engine.wire messages
       └── uvicorn workers ─────┘ N API processes (HTTP, uploads, PNG decoding, validation, answers)

The parent binds the port and hands the socket to N uvicorn workers (uvicorn's multiprocess
supervisor, which replaces a worker that dies); each worker builds the usual app (``create_app``)
whose runtime calls the core (``COMPCAP_ENGINE_SOCKET``) instead of loading the models. The parent
restarts an engine core that exits; while it is away, captions answer 503 ``backend_unavailable``
with ``Retry-After`` and ``/readyz`` 503. SIGTERM (or Ctrl-C) drains: the workers answer what they
have in flight (bounded by the request deadline), then the parent stops the core and exits.

Every process reads the same ``COMPCAP_*`` settings: the parent writes the flags it was given into
its environment before starting them. State the features keep (probe jobs, the schedule's lease, the
shadow reservoir) is in ``COMPCAP_STATE_URL``'s store, so whichever process answers sees it; an
in-memory store (``COMPCAP_STATE_URL=''``) would be one per process and is refused.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from service.cli.errors import UsageError
from service.engine.deadlines import base_deadline_s
from service.settings import Settings

log = logging.getLogger(__name__)

RESTART_PAUSE_S = 0.5  # between an engine core's exit and its replacement
STOP_S = 10.0  # what a core gets to exit after SIGTERM (nothing is in flight by then) before SIGKILL


def app_factory() -> FastAPI:
    """One API process's app (uvicorn calls it in each worker): settings from the environment."""
    from service.gateway.app import create_app
    from service.logs import configure_logging
    from service.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_format, settings.log_level, queued=True)
    logging.getLogger("uvicorn.access").disabled = True  # compcap.access writes one line per request
    return create_app(settings, serving=True)


class CoreSupervisor:
    """Runs ``python -m service.engine.core`` and starts it again whenever it exits, until ``stop``."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="engine-core-supervisor", daemon=True)

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    def _spawn(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self.process = subprocess.Popen(  # its own session: a signal to our group is not for it
                [sys.executable, "-m", "service.engine.core"], env=self.env, start_new_session=True
            )
            self.starts += 1
            log.info("engine core started (pid %d)", self.process.pid)

    def _watch(self) -> None:
        from prometheus_client.multiprocess import mark_process_dead

        while not self._stopping.is_set():
            process = self.process
            assert process is not None
            code = process.wait()
            if self._stopping.is_set():
                return
            log.error("engine core (pid %d) exited with %s; starting another", process.pid, code)
            mark_process_dead(process.pid)  # its live gauges (requests in flight) are gone with it
            time.sleep(RESTART_PAUSE_S)
            self._spawn()

    def stop(self) -> None:
        """SIGTERM the core (SIGKILL after ``STOP_S``) and do not start another."""
        with self._lock:
            self._stopping.set()
            process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def split_environment(settings: Settings, folder: Path) -> dict[str, str]:
    """The environment every process of the split reads its settings from: this one, with the
    values the command line gave, the core's socket and the folder where every process writes its
    Prometheus metrics (any API process's ``/metrics`` serves them all, summed)."""
    env = dict(os.environ)
    for name in ("host", "port", "repo", "device", "precision", "api_processes"):
        env[f"COMPCAP_{name.upper()}"] = str(getattr(settings, name))
    env["COMPCAP_ENGINE_SOCKET"] = str(folder / "engine.sock")
    (folder / "metrics").mkdir(exist_ok=True)
    # prometheus_client's multiprocess mode: read as it is imported, so set before any process starts
    env["PROMETHEUS_MULTIPROC_DIR"] = str(folder / "metrics")
    return env


FOLDER_PREFIX = "compcap-core-"
OWNER_LOCK = "owner.lock"  # flock'ed by the server that made the folder, for as long as it runs
_held: dict[Path, int] = {}  # this process's folders -> the descriptor holding their lock


def split_folder() -> Path:
    """A new folder, readable by this user only, for one split's engine-core socket and metrics files:
    in the temporary directory (``TMPDIR``, else ``/tmp``), so a pod with a read-only root gives it a
    writable, memory-backed volume there. Folders a dead server left (SIGKILL, OOM: no ``finally`` ran)
    are removed first — in a pod the volume outlives the container and counts against its memory."""
    remove_stale_folders(Path(tempfile.gettempdir()))
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    os.chmod(folder, 0o700)
    descriptor = os.open(folder / OWNER_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_EX)  # released by the kernel however this process ends
    _held[folder] = descriptor
    return folder


def remove_stale_folders(temp: Path) -> list[Path]:
    """Remove the split folders under ``temp`` whose owner lock nobody holds (their server is gone);
    folders of running servers (theirs held, in this process or another) and foreign files stay."""
    removed = []
    for folder in sorted(temp.glob(f"{FOLDER_PREFIX}*")):
        lock = folder / OWNER_LOCK
        if folder in _held or not lock.is_file():  # a folder still being made has no lock yet
            continue
        try:
            descriptor = os.open(lock, os.O_RDWR)
        except OSError:  # another user's, or gone meanwhile
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its server runs
            continue
        finally:
            os.close(descriptor)  # (closing also drops the lock taken just now)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:
        log.info("removed %d split folder(s) a stopped server left: %s", len(removed), removed)
    return removed


def release_split_folder(folder: Path) -> None:
    """Remove ``folder`` and drop its owner lock (the server is done with it)."""
    shutil.rmtree(folder, ignore_errors=True)
    descriptor = _held.pop(folder, None)
    if descriptor is not None:
        os.close(descriptor)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """What uvicorn runs every HTTP process of the gateway with, one or many (``service.gateway.server``
    and ``serve_split``). Its own logging config and access log are off: compcap.access writes one line
    per request. The drain: what is still in flight a request deadline after SIGTERM is cancelled (every
    caption started before it has its answer by then; k8s grace periods count on it). Unbounded, one
    stalled upload on a route without a deadline kept the process alive until its client left."""
    return {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": math.ceil(base_deadline_s(settings)),
    }


def serve_split(settings: Settings) -> None:
    """Serve with ``settings.api_processes`` HTTP processes and one engine core (module docstring)."""
    import uvicorn

    if not settings.state_url:
        raise UsageError(
            "COMPCAP_STATE_URL='' keeps the features' state in each process: with --api-processes > 1 "
            "give it a store every process shares (the default SQLite file, or PostgreSQL)"
        )
    folder = split_folder()
    env = split_environment(settings, folder)
    os.environ.update(env)  # uvicorn's workers are spawned with this environment
    core = CoreSupervisor(env)
    core.start()
    try:
        uvicorn.run(
            "service.gateway.split:app_factory",
            factory=True,
            workers=settings.api_processes,
            **uvicorn_options(settings),
        )
    finally:
        core.stop()
        release_split_folder(folder)


__all__ = [
    "CoreSupervisor",
    "app_factory",
    "release_split_folder",
    "remove_stale_folders",
    "serve_split",
    "split_environment",
    "split_folder",
    "uvicorn_options",
]
