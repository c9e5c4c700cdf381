"""``install(app, runtime)``: the comparison as a feature of the gateway — the ``CompareService``,
``/v1/compare`` and its tag, and with ``COMPCAP_SHADOW_MODEL`` set the shadow comparison: a listener
after caption responses, closed when the app stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.feature import add_tag
from service.compare.configs import parse_configuration
from service.compare.router import router
from service.compare.service import CompareService
from service.compare.shadow import ShadowComparer

TAG = {
    "name": "comparison",
    "description": "Maximum-discrepancy comparison (seed 003): two or more configurations on the same "
    "images, most discrepant first by NGSM; the live shadow comparison's reservoir.",
}


def install(app: FastAPI, runtime: Runtime) -> None:
    """Serve ``POST /v1/compare`` and ``GET /v1/compare/shadow``; feed the shadow, when one is set."""
    settings = runtime.settings
    app.state.compare = CompareService(settings.max_comparisons)
    app.state.shadow = None
    if settings.shadow_model is not None:
        shadow = ShadowComparer(
            parse_configuration(settings.shadow_model),
            settings.shadow_rate,
            runtime.metrics.registry,
            capacity=settings.shadow_reservoir_size,
            max_bytes=settings.shadow_reservoir_bytes,
            keep_images=settings.shadow_keep_images,
            max_pending=settings.shadow_max_pending,
        )

        @asynccontextmanager
        async def running() -> AsyncIterator[None]:
            try:
                yield
            finally:
                await shadow.close()

        app.state.shadow = shadow
        runtime.after_caption.append(shadow.offer_output)
        runtime.lifespans.append(running)
    app.include_router(router)
    add_tag(app, TAG)
