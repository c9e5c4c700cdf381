"""The ``Runtime`` (settings, manifest, metrics and — once loaded — the engine: in this process, or an
engine core in another one when ``COMPCAP_ENGINE_SOCKET`` names it) and the route
dependencies over it as ``Annotated`` aliases (the FastAPI full-stack template's ``api/deps.py``):
a route asks for ``RuntimeDep`` or ``EngineDep`` and never reaches into ``app.state`` itself. The
dependencies are ``async``, so resolving them costs no thread-pool hop per request."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

import numpy as np
from fastapi import Depends, Request

from service.api.errors import ApiError
from service.api.image_url import ImageURLFetcher, ImageURLPolicy
from service.api.reload import Reloader
from service.api.settings import ServiceSettings
from service.backends.base import Backend, backend_devices
from service.backends.registry import make_backend
from service.engine.client import EngineClient
from service.engine.core_client import RemoteEngine
from service.engine.deadlines import request_deadline_s
from service.engine.engine import CaptionEngine, CaptionOutput
from service.manifest import Manifest, load_manifest, repo_version
from service.metrics import Metrics
from service.state.store import StateStore
from service.text.vocabulary import Vocabulary

log = logging.getLogger(__name__)


class Runtime:
    """What the routes need: settings, manifest, metrics and — once loaded — the engine; and what the
    installed features hand the app: listeners after each caption response, work that runs while the
    app does."""

    def __init__(
        self, settings: ServiceSettings, backend: Backend | None = None, freeze_gc: bool = False
    ) -> None:
        """``freeze_gc`` (the serving process): once the models are loaded, every object made so far
        moves to the collector's permanent generation (``gc.freeze``), so a full collection under load
        no longer walks the libraries and sessions (72 ms pauses at 32 clients, measured)."""
        self.settings = settings
        self.freeze_gc = freeze_gc
        version = repo_version(settings.repo)  # before the load: a change meanwhile is seen by the watch
        self.manifest: Manifest = load_manifest(settings.repo)
        self.vocab = Vocabulary.load(settings.repo / self.manifest.vocabulary.file)
        self.metrics = Metrics()
        self.metrics.set_build_info(settings.repo)
        self.metrics.queue_capacity.set(settings.max_queue)
        self.export_deadlines()
        # the shared state the features keep (opened, and migrated, on first use)
        self.state = StateStore(settings.state_url)
        self.image_urls = ImageURLFetcher(ImageURLPolicy.from_settings(settings))  # COMPCAP_IMAGE_URL_*
        self.backend: Backend | None = None
        self.engine: EngineClient | None = None
        self.remote: RemoteEngine | None = None  # the engine core this API process calls, if any
        self.load_error: str | None = None
        # called with (engine, images, output) after a caption response is sent (the shadow comparison)
        self.after_caption: list[Callable[[EngineClient, np.ndarray, CaptionOutput], Awaitable[object]]] = []
        # entered in order once the app has started loading the models, left in reverse before the
        # runtime closes (a feature's jobs and schedules)
        self.lifespans: list[Callable[[], AbstractAsyncContextManager[object]]] = []
        # what changes on disk reaches the routes through it (POST /v1/admin/reload, the watch)
        self.reloader = Reloader(self, version)
        if backend is not None:
            self._attach(backend)

    def export_deadlines(self) -> None:
        """``compcap_request_deadline_seconds`` of each captioner of the manifest (alerts compare the
        caption latency with it)."""
        for captioner in self.manifest.captioners:
            deadline = request_deadline_s(self.settings, captioner)
            self.metrics.request_deadline.labels(model=captioner.name).set(deadline)

    def _attach(self, backend: Backend) -> None:
        self.backend = backend
        self.engine = CaptionEngine(backend, self.manifest, self.vocab, self.settings, self.metrics)
        self.metrics.ready.set(1)

    @property
    def ready(self) -> bool:
        if self.remote is not None:
            return self.remote.connected
        return self.engine is not None

    @property
    def devices(self) -> dict[str, str]:
        """Model -> the device its calls run on, as the backend (or the engine core) found it."""
        if self.remote is not None:
            return dict(self.remote.devices)
        return dict(backend_devices(self.backend))

    async def load(self) -> None:
        if self.engine is not None:
            return
        if self.settings.engine_socket:  # the models are the engine core's: call it
            self.remote = RemoteEngine(
                self.settings.engine_socket,
                self.manifest,
                self.vocab,
                self.settings,
                on_connected=lambda up: self.metrics.ready.set(1 if up else 0),  # ready while it answers
            )
            self.engine = self.remote
            self.remote.start()
            return
        start = time.perf_counter()
        try:
            backend = await make_backend(self.settings, self.manifest, self.metrics)
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.exception("loading the %s backend failed", self.settings.backend)
            return
        self._attach(backend)
        if self.freeze_gc:
            gc.collect()
            gc.freeze()
        log.info("ready in %.2f s", time.perf_counter() - start)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
        if self.backend is not None:
            await self.backend.close()
        self.state.close()


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_engine(runtime: RuntimeDep) -> EngineClient:
    """The engine, or a 503 ``not_ready`` while the models load (or after they failed to)."""
    if runtime.engine is None:
        reason = (
            f"models failed to load: {runtime.load_error}"
            if runtime.load_error
            else "models are still loading"
        )
        raise ApiError(503, "not_ready", reason)
    return runtime.engine


EngineDep = Annotated[EngineClient, Depends(get_engine)]


def from_state(name: str) -> Callable[[Request], Awaitable[Any]]:
    """The dependency that returns ``app.state.<name>``: the service a feature's ``install`` put
    there, for its routes as ``Annotated[TheService, Depends(from_state("name"))]``."""

    async def get(request: Request) -> Any:
        return getattr(request.app.state, name)

    get.__name__ = f"get_{name}"
    return get
