"""The request log, request ids and the request-latency histogram, as one pure ASGI middleware (no
per-request stream wrapping, unlike ``BaseHTTPMiddleware``).

Every HTTP request gets an id — the client's ``X-Request-ID`` when it is a short token of safe
characters, a new one otherwise — returned in the response's ``X-Request-ID`` header, and one log
line on ``compcap.access`` when it ends (and one ``compcap_request_latency_seconds`` observation by
route, method and status): id, method, route template, status, latency and the
fields routes add with ``annotate`` (the model). Never the body, the query string or a header value,
so no image bytes and no API key reach the log."""

from __future__ import annotations

import contextvars
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics

log = logging.getLogger("compcap.access")
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_fields: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("request_log", default=None)


def annotate(**fields: Any) -> None:
    """Add fields to the current request's log line (no-op outside a request)."""
    current = _fields.get()
    if current is not None:
        current.update(fields)


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``X-Request-ID`` when it is safe to echo and log, else a new id (32 hex digits)."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1")
            if _SAFE_ID.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = request_id_of(scope.get("headers", []))
        fields: dict[str, Any] = {}
        token = _fields.set(fields)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [
                    *(h for h in message["headers"] if h[0].lower() != b"x-request-id"),
                    (b"x-request-id", rid.encode()),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _fields.reset(token)
            seconds = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope.get("method", "")
            self.metrics.request_latency.labels(route=route, method=method, status=str(status)).observe(
                seconds
            )
            log.info(
                "request",
                extra={
                    "request_id": rid,
                    "method": method,
                    "route": route,
                    "status": status,
                    "latency_ms": round(seconds * 1000.0, 2),
                    **fields,
                },
            )


__all__ = ["RequestLogMiddleware", "annotate", "request_id_of"]
