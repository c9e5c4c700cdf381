"""Client errors and abandoned requests stay cheap for everyone else.

**Errors.** A connection that keeps sending bad requests has its error answers paced.

Each connection (the ASGI ``client`` address: host and port) has a bucket of ``burst`` error answers
that refills at ``per_s`` per second. While the bucket holds an error, a 4xx answer to bad input
(400, 413, 415, 422; not 401/403/404/429) goes out at once; once it is empty, the answer waits until
the bucket would hold one again (at most ``1 / per_s`` s), an ``asyncio.sleep`` that costs no CPU. A
client that sends junk in a closed loop is so held to ``per_s`` requests per second on each
connection instead of taking the event loop from the users beside it (two such clients cut 24 beam-5
users to 56% of their captions/s, because junk refused cheaply let them send 570 requests/s); an
occasional mistake is answered at once. Behind a proxy that pools connections, the pacing applies to
the pooled connection.

**Abandoned requests.** A client that keeps closing the connection before its answer (499
``client_disconnected``) has its next requests held back before any work starts. Each client (its
address, with its ``Authorization`` header when it sends one; not the connection: abandoners
reconnect) has a bucket of ``burst`` abandoned requests refilling at ``per_s``; each abandoned request
takes one; while the bucket is in debt a new request from that client waits (``asyncio.sleep``, at most
``1 / per_s`` s) before the gateway reads its body. A client that hangs up during the wait costs a
connection and a header parse, not the decoding, encoding and steps of its images: four clients
sending 4-image requests and leaving after 50 ms took a third of 24 users' captions/s, because the
work of those first 50 ms was real. A user whose timeout is sometimes too short keeps the burst.
Behind a proxy that hides client addresses, anonymous clients share one bucket: set
``abandon_pace_per_s`` to 0 there."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.checks import above, at_least
from service.metrics import Metrics

PACED_STATUSES = frozenset({400, 413, 415, 422})
CLIENT_CLOSED = 499  # the answer to a request whose client closed the connection first
MAX_TRACKED = 4096  # connections remembered; the least recently seen is forgotten first


class ErrorBuckets:
    """Per-key token buckets of error answers or abandoned requests (a key is a connection or a
    client)."""

    def __init__(self, burst: int, per_s: float, max_tracked: int = MAX_TRACKED) -> None:
        at_least(1, burst=burst)
        above(0, per_s=per_s)
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

    def due(self, key: object, now: float) -> float:
        """Seconds until ``key``'s bucket is out of debt (0: not in debt), spending nothing."""
        if key not in self._buckets:
            return 0.0
        tokens, at = self._buckets[key]
        tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
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


def client_key(scope: Scope) -> tuple[str, int | None]:
    """Who sent a request, for abandon pacing: its address, and its ``Authorization`` header when it
    sends one (keyed clients behind one proxy address are kept apart; the port is not part of it)."""
    client = scope.get("client")
    credential = next((hash(v) for n, v in scope.get("headers") or () if n == b"authorization"), None)
    return (client[0] if client else "?", credential)


class AbandonPacingMiddleware:
    """Pure ASGI middleware: holds back the requests of a client that keeps abandoning its requests
    (module docstring)."""

    def __init__(self, app: ASGIApp, burst: int, per_s: float, metrics: Metrics | None = None) -> None:
        self.app, self.metrics = app, metrics
        self.buckets = ErrorBuckets(burst, per_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        key = client_key(scope)
        wait = self.buckets.due(key, time.monotonic())
        if wait > 0:
            if self.metrics is not None:
                self.metrics.paced_abandoners.inc()
            await asyncio.sleep(wait)
        status = 0

        async def watched_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        finally:
            if status == CLIENT_CLOSED:
                self.buckets.take(key, time.monotonic())
