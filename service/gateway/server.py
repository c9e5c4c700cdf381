"""``serve(settings)``: run the gateway under uvicorn (settings: ``service.settings.load_settings``; the
features check their own settings as they install, and a bad one exits the same way)."""

from __future__ import annotations

import uvicorn
from pydantic import ValidationError

from service.gateway.app import create_app
from service.logs import configure_logging
from service.settings import Settings, settings_exit


def serve(settings: Settings) -> None:
    """Serve ``settings.repo`` on ``settings.host:settings.port`` until interrupted."""
    configure_logging(settings.log_format, settings.log_level)
    try:
        app = create_app(settings)
    except ValidationError as exc:  # a feature's setting (the probe schedule, the shadow) is invalid
        raise settings_exit(exc) from None
    # uvicorn's own logging config and access log are off: compcap.access writes one line per request
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        log_level=settings.log_level,
    )
