"""``serve(settings)``: run the gateway under uvicorn (settings: ``service.settings.load_settings``)."""

from __future__ import annotations

import logging

import uvicorn

from service.api.app import create_app
from service.settings import Settings


def serve(settings: Settings) -> None:
    """Serve ``settings.repo`` on ``settings.host:settings.port`` until interrupted."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
