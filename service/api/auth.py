"""API keys: with ``COMPCAP_API_KEYS`` set, the heavy endpoints (probes; later explanations and
comparison) need ``Authorization: Bearer <key>`` — 401 without one, 403 with a wrong one. Captions stay
open unless ``COMPCAP_CAPTIONS_REQUIRE_KEY`` is true. Keys are compared in constant time and never
logged or echoed."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from service.api.deps import Runtime, RuntimeDep, get_engine, get_runtime
from service.api.errors import ApiError
from service.engine.client import EngineClient

CHALLENGE = {"WWW-Authenticate": "Bearer"}
# the OpenAPI error entries of every route behind ``require_key``
KEY_ERRORS: dict[int | str, dict[str, str]] = {
    401: {"description": "API keys are configured and none was sent"},
    403: {"description": "the API key is not valid"},
}


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else ""


def check_key(keys: frozenset[str], request: Request) -> None:
    """Nothing when no key is configured or the request carries a valid one; else a 401/403 ``ApiError``."""
    if not keys:
        return
    token = _bearer(request)
    if token is None:
        raise ApiError(401, "unauthorized", "this endpoint needs 'Authorization: Bearer <key>'", CHALLENGE)
    if not token:
        raise ApiError(401, "unauthorized", "the Authorization header must be 'Bearer <key>'", CHALLENGE)
    if not any(hmac.compare_digest(token.encode(), key.encode()) for key in keys):
        raise ApiError(403, "forbidden", "the API key is not valid")


async def require_key(request: Request, runtime: RuntimeDep) -> None:
    """Dependency of the key-protected routes."""
    check_key(runtime.settings.api_key_set(), request)


@dataclass(frozen=True)
class CaptionAccess:
    """What the caption route needs from the process: the runtime and its engine."""

    runtime: Runtime
    engine: EngineClient


async def caption_access(request: Request) -> CaptionAccess:
    """The caption route's one dependency (one resolution per request instead of four, on the hot
    path): the key check when ``captions_require_key`` is set (401/403), then the engine (503
    ``not_ready`` while the models load)."""
    runtime = await get_runtime(request)
    if runtime.settings.captions_require_key:
        check_key(runtime.settings.api_key_set(), request)
    return CaptionAccess(runtime, await get_engine(runtime))


CaptionAccessDep = Annotated[CaptionAccess, Depends(caption_access)]
