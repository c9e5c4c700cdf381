"""Every failure becomes ``{"error": {"code", "message"}}`` with a 4xx/5xx status, counted by reason."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.backends.base import BackendError
from service.engine.captioning import EngineError, OverloadedError, UnknownModelError
from service.images import ImageError
from service.metrics import Metrics

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_response(
    status: int, code: str, message: str, details: list[dict[str, Any]] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status)


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "request"


def validation_response(errors: list[Any]) -> JSONResponse:
    details = [{"field": _loc(e.get("loc", ())), "message": e.get("msg", "")} for e in errors]
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
    return error_response(422, "validation_error", message, details)


def install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    def count(code: str) -> None:
        metrics.errors.labels(reason=code).inc()

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        count(exc.code)
        return error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(ImageError)
    async def _image(_: Request, exc: ImageError) -> JSONResponse:
        count(exc.code)
        return error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(EngineError)
    async def _engine(_: Request, exc: EngineError) -> JSONResponse:
        count(exc.code)
        if isinstance(exc, OverloadedError):
            response = error_response(503, exc.code, exc.message)
            response.headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
            return response
        status = 404 if isinstance(exc, UnknownModelError) else 422
        return error_response(status, exc.code, exc.message, [{"field": exc.field, "message": exc.message}])

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        count("validation_error")
        return validation_response(list(exc.errors()))

    @app.exception_handler(ValidationError)
    async def _validation(_: Request, exc: ValidationError) -> JSONResponse:
        count("validation_error")
        return validation_response(list(exc.errors()))

    @app.exception_handler(BackendError)
    async def _backend(_: Request, exc: BackendError) -> JSONResponse:
        count(f"backend_{exc.reason}")
        log.error("backend failure: %s", exc)
        return error_response(502, "backend_error", str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        count(code)
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        count("internal_error")
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; see the server log")
