"""Abandon pacing: a client that keeps closing the connection before its answer (499) has its next
requests held back before the app sees them; other clients, answered requests and GETs are not."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from service.api.pacing import AbandonPacingMiddleware, ErrorBuckets, client_key


def test_due_reports_the_debt_without_spending() -> None:
    b = ErrorBuckets(burst=2, per_s=4.0)
    assert b.due("a", 0.0) == 0.0  # unknown: no debt
    b.take("a", 0.0)
    b.take("a", 0.0)
    assert b.due("a", 0.0) == 0.0  # the burst is spent, not overdrawn
    b.take("a", 0.0)
    assert b.due("a", 0.0) == pytest.approx(0.25) and b.due("a", 0.0) == pytest.approx(0.25)
    assert b.due("a", 0.1) == pytest.approx(0.15)  # refilling
    assert b.due("a", 0.3) == 0.0 and b.due("b", 0.0) == 0.0


def test_the_client_is_its_address_and_credential_not_its_port() -> None:
    def scope(port: int, auth: bytes | None = None) -> dict[str, Any]:
        headers = [(b"authorization", auth)] if auth else []
        return {"client": ("10.0.0.7", port), "headers": [(b"host", b"x"), *headers]}

    assert client_key(scope(1)) == client_key(scope(2))
    assert client_key(scope(1, b"Bearer k1")) == client_key(scope(2, b"Bearer k1"))
    assert client_key(scope(1, b"Bearer k1")) != client_key(scope(1, b"Bearer k2"))
    assert client_key(scope(1, b"Bearer k1")) != client_key(scope(1))
    assert client_key({"client": ("10.0.0.8", 1)}) != client_key(scope(1))


def run_requests(
    middleware: AbandonPacingMiddleware, scopes: list[dict[str, Any]]
) -> tuple[list[float], list[int]]:
    """Each scope in turn; the seconds until the app saw it, and the statuses."""
    seen: list[float] = []
    statuses: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def go() -> None:
        for scope in scopes:
            middleware.sent_at = time.perf_counter()  # type: ignore[attr-defined]
            await middleware(scope, None, send)  # type: ignore[arg-type]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(time.perf_counter() - middleware.sent_at)  # type: ignore[attr-defined]
        await send({"type": "http.response.start", "status": scope["answer"], "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware.app = app
    asyncio.run(go())
    return seen, statuses


def post(address: str, answer: int, method: str = "POST") -> dict[str, Any]:
    return {"type": "http", "method": method, "client": (address, 4000), "headers": [], "answer": answer}


def test_an_abandoner_is_held_back_after_its_burst_and_others_are_not() -> None:
    paced = AbandonPacingMiddleware(lambda *a: None, burst=2, per_s=10.0)  # type: ignore[arg-type]
    gone = post("10.0.0.1", 499)
    scopes = [gone, gone, gone, gone, post("10.0.0.2", 200), post("10.0.0.1", 200, "GET")]
    seen, statuses = run_requests(paced, scopes)
    assert statuses == [499, 499, 499, 499, 200, 200]
    assert max(seen[:3]) < 0.05  # the burst of 2, and the request that overdraws it, go at once
    assert seen[3] >= 0.08  # then one request per 1/per_s s, before the app sees it
    assert seen[4] < 0.05 and seen[5] < 0.05  # another client; a GET


def test_answered_requests_do_not_spend_the_bucket() -> None:
    paced = AbandonPacingMiddleware(lambda *a: None, burst=1, per_s=5.0)  # type: ignore[arg-type]
    seen, statuses = run_requests(paced, [post("10.0.0.1", 200)] * 5)
    assert statuses == [200] * 5 and max(seen) < 0.05
