"""``install(app, runtime)``: the probes as a feature of the gateway — the ``ProbeService`` built from
the settings, its routes, its tag, and, while the app runs, the heartbeats, the gauges read back from
the shared state and the schedule.
``COMPCAP_PROBE_SCHEDULE`` is parsed here, at start-up: a bad one stops the start as any invalid
setting does."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.feature import add_tag, closing
from service.probes.http.endpoints import router
from service.probes.jobs.probe_service import ProbeService
from service.probes.jobs.schedule import ProbeSchedule, parse_schedule
from service.probes.kinds import kind_names
from service.probes.settings import ProbeSettings
from service.sections import check_setting
from service.state.settings import StateSettings

log = logging.getLogger(__name__)


def probe_schedule(settings: ProbeSettings) -> ProbeSchedule | None:
    """``COMPCAP_PROBE_SCHEDULE`` parsed (None: unset); a ``ValidationError`` at ``probe_schedule``
    names the part of the schedule at fault."""
    if settings.probe_schedule is None:
        return None
    return check_setting("probe_schedule", settings.probe_schedule, parse_schedule)


def install(app: FastAPI, runtime: Runtime) -> None:
    """Serve ``/v1/probes`` and ``/v1/probe-sets``; run the probe schedule while the app runs."""
    settings = ProbeSettings.of(runtime.settings)  # its own section
    schedule = probe_schedule(settings)
    state = StateSettings.of(runtime.settings)
    probes = ProbeService(
        runtime.settings.engine.repo,
        runtime.manifest,
        runtime.metrics.registry,
        settings.max_probe_jobs,
        runtime.state,
        schedule=schedule,
        heartbeat_s=state.state_heartbeat_s,
        stale_s=state.state_stale_s,
        lease_s=state.state_lease_s,
        refresh_s=5 * state.state_heartbeat_s,  # other replicas' results reach the gauges within it
    )

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        try:
            restored = await runtime.state.call(probes.refresh)
            log.info("probe gauges read back from %s: %d result(s)", runtime.state.shown_url, restored)
        except Exception:  # captions go on; the probe routes answer 503 until the store is back
            log.exception("the state store %s could not be read", runtime.state.shown_url)
        probes.run(lambda: runtime.engine)
        yield

    app.state.probes = probes
    runtime.reloader.on_reload(probes.use)
    app.include_router(router)
    kinds = ", ".join(kind_names())
    add_tag(app, {"name": "probes", "description": f"Live compositional probes ({kinds}) as jobs."})
    runtime.lifespans.extend([running, closing(probes.close)])  # closed first, as the app stops
