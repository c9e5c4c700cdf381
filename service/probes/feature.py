"""``install(app, runtime)``: the probes as a feature of the gateway — the ``ProbeService`` built from
the settings, its routes, its tag, and, while the app runs, the restored history and the schedule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.feature import add_tag
from service.probes.router import router
from service.probes.schedule import parse_schedule
from service.probes.service import ProbeService

TAG = {
    "name": "probes",
    "description": "Live compositional probes (systematicity, productivity, substitutivity) as jobs.",
}


def install(app: FastAPI, runtime: Runtime) -> None:
    """Serve ``/v1/probes`` and ``/v1/probe-sets``; run the probe schedule while the app runs."""
    settings = runtime.settings
    probes = ProbeService(
        settings.repo,
        runtime.manifest,
        runtime.metrics.registry,
        settings.max_probe_jobs,
        history=Path(settings.probe_history) if settings.probe_history else None,
        schedule=parse_schedule(settings.probe_schedule) if settings.probe_schedule else None,
    )

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        probes.restore()
        probes.start_schedule(lambda: runtime.engine)
        try:
            yield
        finally:
            await probes.close()

    app.state.probes = probes
    app.include_router(router)
    add_tag(app, TAG)
    runtime.lifespans.append(running)
