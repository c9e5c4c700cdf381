"""``create_app(settings)``: the FastAPI application. The manifest and vocabulary load at once (bad
repositories fail fast); the backend's sessions load in the background so ``/readyz`` answers 503
until they are ready. The caption routes are always served; each feature named in
``COMPCAP_FEATURES`` installs itself (``service.gateway.features``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.api.deps import Runtime
from service.api.handlers import install_error_handlers
from service.api.limits import QueryLimitMiddleware
from service.api.pacing import AbandonPacingMiddleware, ErrorPacingMiddleware
from service.api.requestlog import RequestLogMiddleware
from service.backends.base import Backend
from service.gateway.admin import router as admin_router
from service.gateway.docs import install_docs
from service.gateway.features import installs
from service.gateway.hf_task import router as hf_router
from service.gateway.openapi import TAGS, install_openapi
from service.gateway.routes import router
from service.gateway.settings import GatewaySettings
from service.settings import Settings
from service.web import install_web


def create_app(
    settings: Settings | None = None, backend: Backend | None = None, serving: bool = False
) -> FastAPI:
    """The gateway app. ``backend`` replaces the one named in settings (tests, other runners);
    ``serving``: the app is the process's (``compcap serve``), which may tune the process for it."""
    settings = settings if settings is not None else Settings()
    runtime = Runtime(settings, backend, freeze_gc=serving)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(runtime.load())
        watch_s = settings.repo_watch_s
        watch = asyncio.create_task(runtime.reloader.watch(watch_s)) if watch_s > 0 else None
        try:
            async with AsyncExitStack() as features:
                for running in runtime.lifespans:  # the features' jobs, left in reverse order
                    await features.enter_async_context(running())
                yield
        finally:
            tasks = [t for t in (task, watch) if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await runtime.close()

    app = FastAPI(
        title="CompCap",
        version="0.1.0",
        description="Image captioning with beam search, ranker re-ranking and compositional diagnostics.",
        lifespan=lifespan,
        openapi_tags=list(TAGS),
        docs_url=None,  # served offline by install_docs
        redoc_url=None,
    )
    app.state.runtime = runtime
    install_error_handlers(app, runtime.metrics)
    app.include_router(router)
    app.include_router(admin_router)  # POST /v1/admin/reload
    app.include_router(hf_router)  # POST /: the Hugging Face image-to-text task (huggingface_hub's client)
    for install in installs(settings):
        install(app, runtime)
    install_docs(app)
    install_openapi(app)
    install_web(app)
    _add_middleware(app, runtime, GatewaySettings.of(settings))
    return app


def _add_middleware(app: FastAPI, runtime: Runtime, settings: GatewaySettings) -> None:
    app.add_middleware(QueryLimitMiddleware, metrics=runtime.metrics)
    pacing = (
        (ErrorPacingMiddleware, settings.error_pace_per_s, settings.error_pace_burst),
        (AbandonPacingMiddleware, settings.abandon_pace_per_s, settings.abandon_pace_burst),
    )
    for middleware, per_s, burst in pacing:
        if per_s > 0:  # 0 turns that pacing off
            app.add_middleware(middleware, burst=burst, per_s=per_s, metrics=runtime.metrics)
    # outermost: 4xx from the limits above get ids, log lines and latency observations too
    app.add_middleware(RequestLogMiddleware, metrics=runtime.metrics)
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if origins:  # a page on another origin may call the API (preflights answered before anything else)
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["authorization", "content-type", "x-request-id"],
            expose_headers=["x-request-id", "retry-after", "location"],
            max_age=600,
        )
