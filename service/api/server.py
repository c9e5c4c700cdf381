"""``serve(host, port, repo)``: run the gateway under uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path

import uvicorn
from pydantic import ValidationError

from service.api.app import create_app
from service.settings import Settings


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment plus ``overrides``; invalid values exit naming the field."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SystemExit(f"compcap serve: invalid settings: {problems}") from None


def serve(host: str, port: int, repo: str | Path) -> None:
    settings = load_settings(host=host, port=port, repo=Path(repo))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
