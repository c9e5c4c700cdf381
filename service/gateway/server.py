"""``serve(settings)``: run the gateway under uvicorn (settings: ``service.settings.load_settings``)."""

from __future__ import annotations

import uvicorn

from service.gateway.app import create_app
from service.logs import configure_logging
from service.settings import Settings


def serve(settings: Settings) -> None:
    """Serve ``settings.repo`` on ``settings.host:settings.port`` until interrupted."""
    configure_logging(settings.log_format, settings.log_level)
    # uvicorn's own logging config and access log are off: compcap.access writes one line per request
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        log_level=settings.log_level,
    )
