"""``create_app(settings)``: the FastAPI application. The manifest and vocabulary load at once (bad
repositories fail fast); the backend's sessions load in the background so ``/readyz`` answers 503
until they are ready."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api.errors import install_error_handlers
from service.api.observe import LatencyMiddleware
from service.api.routes import router
from service.backends.base import Backend
from service.backends.factory import make_backend
from service.engine.captioning import CaptionEngine, EngineLimits, SchedulerLimits
from service.manifest import Manifest, load_manifest
from service.metrics import Metrics
from service.settings import Settings
from service.text.vocabulary import Vocabulary

log = logging.getLogger(__name__)


class Runtime:
    """What the routes need: settings, manifest, metrics and — once loaded — the engine."""

    def __init__(self, settings: Settings, backend: Backend | None = None) -> None:
        self.settings = settings
        self.manifest: Manifest = load_manifest(settings.repo)
        self.vocab = Vocabulary.load(settings.repo / self.manifest.vocabulary.file)
        self.metrics = Metrics()
        self.limits = EngineLimits(
            default_beam_size=settings.default_beam_size,
            max_beam_size=settings.max_beam_size,
            max_length_cap=settings.max_length_cap,
        )
        self.backend: Backend | None = None
        self.engine: CaptionEngine | None = None
        self.load_error: str | None = None
        if backend is not None:
            self._attach(backend)

    def _attach(self, backend: Backend) -> None:
        self.backend = backend
        scheduling = (
            SchedulerLimits(
                max_rows=self.settings.max_rows_per_step,
                max_queue=self.settings.max_queue,
                max_active=self.settings.max_active_requests,
            )
            if self.settings.cross_request_batching
            else None
        )
        self.engine = CaptionEngine(backend, self.manifest, self.vocab, self.metrics, self.limits, scheduling)
        self.metrics.ready.set(1)

    @property
    def ready(self) -> bool:
        return self.engine is not None

    async def load(self) -> None:
        if self.ready:
            return
        start = time.perf_counter()
        try:
            backend = await make_backend(self.settings, self.manifest, self.metrics)
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.exception("loading the %s backend failed", self.settings.backend)
            return
        self._attach(backend)
        log.info("ready in %.2f s", time.perf_counter() - start)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
        if self.backend is not None:
            await self.backend.close()


def create_app(settings: Settings | None = None, backend: Backend | None = None) -> FastAPI:
    """The gateway app. ``backend`` replaces the one named in settings (tests, other runners)."""
    settings = settings if settings is not None else Settings()
    runtime = Runtime(settings, backend)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(runtime.load())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await runtime.close()

    app = FastAPI(
        title="CompCap",
        version="0.1.0",
        description="Image captioning with beam search, ranker re-ranking and compositional diagnostics.",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    install_error_handlers(app, runtime.metrics)
    app.include_router(router)

    app.add_middleware(LatencyMiddleware, metrics=runtime.metrics)
    return app
