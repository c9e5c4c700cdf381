"""Every exception becomes an ``errors`` response with a 4xx/5xx status, counted by reason."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from service.api.errors import error_response, validation_response
from service.api.gate import RequestError
from service.api.requestlog import annotate
from service.backends.base import BackendError
from service.engine.params import EngineError, OverloadedError, UnknownModelError
from service.images.decode import ImageError
from service.metrics import Metrics

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}


def _body_model(request: Request) -> Any:
    """The pydantic model FastAPI validated the route's body with, if any (for ``did you mean``)."""
    field = getattr(request.scope.get("route"), "body_field", None)
    return None if field is None else getattr(field.field_info, "annotation", None)


def install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    def count(code: str) -> None:
        metrics.errors.labels(reason=code).inc()
        annotate(error=code)

    @app.exception_handler(RequestError)  # the kit's ApiError, a feature's refusal, a full gate (429)
    async def _refused(_: Request, exc: RequestError) -> JSONResponse:
        count(exc.code)
        details = None if exc.field is None else [{"field": exc.field, "message": exc.message}]
        response = error_response(exc.status, exc.code, exc.message, details)
        response.headers.update(exc.headers)
        return response

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

    @app.exception_handler(RequestValidationError)  # FastAPI's, and the kit's own ``InvalidRequest``
    async def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        count("validation_error")
        return validation_response(list(exc.errors()), getattr(exc, "model", None) or _body_model(request))

    @app.exception_handler(ValidationError)
    async def _validation(_: Request, exc: ValidationError) -> JSONResponse:
        count("validation_error")
        return validation_response(list(exc.errors()))

    @app.exception_handler(BackendError)
    async def _backend(_: Request, exc: BackendError) -> JSONResponse:
        count(f"backend_{exc.reason}")
        log.error("backend failure: %s", exc)
        if exc.reason == "unavailable":  # no model server answers now: retry shortly (it recovers alone)
            response = error_response(503, "backend_unavailable", str(exc))
            response.headers["Retry-After"] = "1"
            return response
        return error_response(502, "backend_error", str(exc))

    @app.exception_handler(sa_exc.OperationalError)  # the state store is away (jobs, baselines)
    async def _state(_: Request, exc: sa_exc.OperationalError) -> JSONResponse:
        count("state_unavailable")
        log.error("state store unavailable: %s", exc.orig)
        response = error_response(503, "state_unavailable", "the state store is unavailable; retry shortly")
        response.headers["Retry-After"] = "5"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        count(code)
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(ClientDisconnect)
    async def _gone(_: Request, exc: ClientDisconnect) -> JSONResponse:  # left while its body was read
        count("client_disconnected")
        return error_response(499, "client_disconnected", "the client closed the connection")

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        count("internal_error")
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; see the server log")
