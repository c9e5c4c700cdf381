"""``create_app(settings)``: the FastAPI application. The manifest and vocabulary load at once (bad
repositories fail fast); the backend's sessions load in the background so ``/readyz`` answers 503
until they are ready."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.handlers import install_error_handlers
from service.api.limits import QueryLimitMiddleware
from service.api.pacing import AbandonPacingMiddleware, ErrorPacingMiddleware
from service.api.requestlog import RequestLogMiddleware
from service.backends.base import Backend
from service.compare.configs import parse_configuration
from service.compare.router import router as compare_router
from service.compare.service import CompareService
from service.compare.shadow import ShadowComparer
from service.explain.router import router as explain_router
from service.explain.service import ExplainService
from service.gateway.docs import install_docs
from service.gateway.openapi import TAGS, install_openapi
from service.gateway.routes import router
from service.probes.router import router as probe_router
from service.probes.schedule import parse_schedule
from service.probes.service import ProbeService
from service.settings import Settings
from service.web import install_web


def create_app(settings: Settings | None = None, backend: Backend | None = None) -> FastAPI:
    """The gateway app. ``backend`` replaces the one named in settings (tests, other runners)."""
    settings = settings if settings is not None else Settings()
    runtime = Runtime(settings, backend)
    probes = ProbeService(
        settings.repo,
        runtime.manifest,
        runtime.metrics.registry,
        settings.max_probe_jobs,
        history=Path(settings.probe_history) if settings.probe_history else None,
        schedule=parse_schedule(settings.probe_schedule) if settings.probe_schedule else None,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(runtime.load())
        probes.restore()
        probes.start_schedule(lambda: runtime.engine)
        try:
            yield
        finally:
            await probes.close()
            if app.state.shadow is not None:
                await app.state.shadow.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await runtime.close()

    app = FastAPI(
        title="CompCap",
        version="0.1.0",
        description="Image captioning with beam search, ranker re-ranking and compositional diagnostics.",
        lifespan=lifespan,
        openapi_tags=TAGS,
        docs_url=None,  # served offline by install_docs
        redoc_url=None,
    )
    app.state.runtime = runtime
    app.state.probes = probes
    app.state.explain = ExplainService(
        settings.repo,
        runtime.manifest,
        runtime.vocab,
        settings.max_explanations,
        settings.explain_max_ig_steps,
        settings.explain_torch_threads,
    )
    app.state.compare = CompareService(settings.max_comparisons)
    app.state.shadow = (
        None
        if settings.shadow_model is None
        else ShadowComparer(
            parse_configuration(settings.shadow_model),
            settings.shadow_rate,
            runtime.metrics.registry,
            capacity=settings.shadow_reservoir_size,
            max_bytes=settings.shadow_reservoir_bytes,
            keep_images=settings.shadow_keep_images,
            max_pending=settings.shadow_max_pending,
        )
    )
    if app.state.shadow is not None:
        runtime.after_caption.append(app.state.shadow.offer_output)
    install_error_handlers(app, runtime.metrics)
    app.include_router(router)
    app.include_router(probe_router)
    app.include_router(explain_router)
    app.include_router(compare_router)
    install_docs(app)
    install_openapi(app)
    install_web(app)

    app.add_middleware(QueryLimitMiddleware, metrics=runtime.metrics)
    if settings.error_pace_per_s > 0:
        app.add_middleware(
            ErrorPacingMiddleware,
            burst=settings.error_pace_burst,
            per_s=settings.error_pace_per_s,
            metrics=runtime.metrics,
        )
    if settings.abandon_pace_per_s > 0:
        app.add_middleware(
            AbandonPacingMiddleware,
            burst=settings.abandon_pace_burst,
            per_s=settings.abandon_pace_per_s,
            metrics=runtime.metrics,
        )
    # outermost: 4xx from the limits above get ids, log lines and latency observations too
    app.add_middleware(RequestLogMiddleware, metrics=runtime.metrics)
    return app
