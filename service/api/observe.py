"""Request latency by route, method and status, as a pure ASGI middleware (no per-request stream
wrapping, unlike ``BaseHTTPMiddleware``)."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics


class LatencyMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: dict[str, Any] = {"code": 500}

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            self.metrics.request_latency.labels(
                route=getattr(route, "path", "unmatched"),
                method=scope.get("method", ""),
                status=str(status["code"]),
            ).observe(time.perf_counter() - start)
