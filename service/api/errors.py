"""The shape of every failure: ``{"error": {"code", "message", "details"?}}`` with a 4xx/5xx status
(``handlers`` maps exceptions to it; a ``RequestError`` carries its status, code, field and headers).
Knows nothing of the engine."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from service.api.gate import RequestError

MAX_MESSAGE = 2_000  # characters of an error message: a hostile value is never echoed whole
MAX_DETAILS = 20


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ErrorJSONResponse(JSONResponse):
    """ASCII JSON: an echoed lone surrogate or control character cannot break the rendering."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class ApiError(RequestError):
    """A request the kit or a router refuses (the ``RequestError`` a feature's service raises, by
    another name): one handler answers both."""


def error_response(
    status: int, code: str, message: str, details: list[dict[str, Any]] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": _clip(message)}
    if details is not None:
        body["details"] = [{k: _clip(str(v)) for k, v in d.items()} for d in details[:MAX_DETAILS]]
    return ErrorJSONResponse({"error": body}, status_code=status)


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return _clip(".".join(parts), 200) or "request"


def validation_response(errors: list[Any]) -> JSONResponse:
    details = [{"field": _loc(e.get("loc", ())), "message": e.get("msg", "")} for e in errors[:MAX_DETAILS]]
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
    return error_response(422, "validation_error", message, details)
