"""Client errors stay cheap for everyone else: a connection that keeps sending bad requests has its
error answers paced.

Each connection (the ASGI ``client`` address: host and port) has a bucket of ``burst`` error answers
that refills at ``per_s`` per second. While the bucket holds an error, a 4xx answer to bad input
(400, 413, 415, 422; not 401/403/404/429) goes out at once; once it is empty, the answer waits until
the bucket would hold one again (at most ``1 / per_s`` s), an ``asyncio.sleep`` that costs no CPU. A
client that sends junk in a closed loop is so held to ``per_s`` requests per second on each
connection instead of taking the event loop from the users beside it (two such clients cut 24 beam-5
users to 56% of their captions/s, because junk refused cheaply let them send 570 requests/s); an
occasional mistake is answered at once. Behind a proxy that pools connections, the pacing applies to
the pooled connection."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics

PACED_STATUSES = frozenset({400, 413, 415, 422})
MAX_TRACKED = 4096  # connections remembered; the least recently seen is forgotten first


class ErrorBuckets:
    """Per-key token buckets of error answers (a key is a connection)."""

    def __init__(self, burst: int, per_s: float, max_tracked: int = MAX_TRACKED) -> None:
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        if per_s <= 0:
            raise ValueError(f"per_s must be > 0, got {per_s}")
        self.burst, self.per_s, self.max_tracked = burst, per_s, max_tracked
        self._buckets: OrderedDict[object, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: object, now: float) -> float:
        """Spend one error from ``key``'s bucket; the seconds its answer must wait (0: at once). An
        empty bucket goes into debt by the answer it holds back (at most one), so a paced connection
        gets ``per_s`` answers per second, not twice that."""
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        tokens = max(min(float(self.burst), tokens + (now - at) * self.per_s) - 1.0, -1.0)
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_tracked:
            self._buckets.popitem(last=False)
        return -tokens / self.per_s if tokens < 0 else 0.0


class ErrorPacingMiddleware:
    """Pure ASGI middleware: delays a paced connection's 4xx answers (module docstring)."""

    def __init__(self, app: ASGIApp, burst: int, per_s: float, metrics: Metrics | None = None) -> None:
        self.app, self.metrics = app, metrics
        self.buckets = ErrorBuckets(burst, per_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = tuple(scope.get("client") or ("?", 0))

        async def paced_send(message: Message) -> None:
            start = message["type"] == "http.response.start"
            wait = 0.0
            if start and message["status"] in PACED_STATUSES:
                wait = self.buckets.take(key, time.monotonic())
            if wait > 0:
                if self.metrics is not None:
                    self.metrics.paced_errors.inc()
                await asyncio.sleep(wait)
            await send(message)

        await self.app(scope, receive, paced_send)
