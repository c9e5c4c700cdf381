"""The contract between the gateway and a feature package (probes, explanations, comparison): each
exposes one ``install(app, runtime)`` that builds its service from the settings, includes its
router, adds its OpenAPI tag and hands its listeners and background work to the ``Runtime``
(``after_caption``, ``lifespans``; ``closing``: a service closed when the app stops). The gateway
calls the installs of the features it serves.

And what every feature router opens with: ``feature_router`` (its tag, every route key-protected)
and ``error_responses`` (its documented errors, the API-key ones and the full gate's 429 included);
its service reaches its routes through ``deps.from_state``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI

from service.api.auth import KEY_ERRORS, require_key
from service.api.deps import Runtime

Install = Callable[[FastAPI, Runtime], None]


def add_tag(app: FastAPI, tag: dict[str, Any]) -> None:
    """List ``tag`` (``name``, ``description``) after the app's tags in its OpenAPI document."""
    app.openapi_tags = [*(app.openapi_tags or []), tag]


def closing(close: Callable[[], Awaitable[object]]) -> Callable[[], AbstractAsyncContextManager[None]]:
    """A lifespan for ``Runtime.lifespans`` that awaits ``close()`` when the app stops: a feature's
    service closed with the app."""

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        try:
            yield
        finally:
            await close()

    return running


def feature_router(tag: str) -> APIRouter:
    """A feature's router: its routes under ``tag``, each one key-protected when
    ``COMPCAP_API_KEYS`` is set."""
    return APIRouter(tags=[tag], dependencies=[Depends(require_key)])


def error_responses(busy: str, descriptions: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """A feature route's documented errors (``responses=``): ``descriptions``, the API-key errors and
    the 429 of its full gate (``too many {busy} running``), in status order."""
    table: dict[int | str, dict[str, Any]] = {
        **{status: {"description": text} for status, text in descriptions.items()},
        **KEY_ERRORS,
        429: {"description": f"too many {busy} running (Retry-After)"},
    }
    return dict(sorted(table.items(), key=lambda item: str(item[0])))  # three-digit codes: text order
