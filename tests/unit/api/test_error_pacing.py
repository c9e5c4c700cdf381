"""Error pacing: a connection's burst of 4xx answers goes out at once, the next waits; buckets refill
at their rate, are kept per connection, and only answers to bad input are paced."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from service.api.pacing import ErrorBuckets, ErrorPacingMiddleware


def test_bucket_burst_refill_and_keys() -> None:
    b = ErrorBuckets(burst=3, per_s=2.0)
    assert [b.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("a", 0.0) == pytest.approx(0.5)  # empty: wait for the next token (1 / 2 s)
    assert b.take("b", 0.0) == 0.0  # another connection has its own bucket
    assert b.take("a", 0.5) == pytest.approx(0.5)  # the held-back answer used the token of 0..0.5 s
    assert b.take("a", 1.5) == 0.0  # a full second later: one token owed, two earned
    assert b.take("a", 100.0) == 0.0 and b.take("a", 100.0) == 0.0 and b.take("a", 100.0) == 0.0
    assert b.take("a", 100.0) == pytest.approx(0.5)


def test_bucket_forgets_least_recent_connections() -> None:
    b = ErrorBuckets(burst=1, per_s=1.0, max_tracked=2)
    assert b.take("a", 0.0) == b.take("b", 0.0) == b.take("c", 0.0) == 0.0
    assert b.take("a", 0.0) == 0.0  # "a" was forgotten: a full bucket again
    assert b.take("c", 0.0) > 0.0


@pytest.mark.parametrize("bad", [True, False])
def test_middleware_paces_only_bad_input_answers(bad: bool) -> None:
    status = 400 if bad else 404

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    paced = ErrorPacingMiddleware(app, burst=2, per_s=10.0)
    scope = {"type": "http", "client": ("127.0.0.1", 5555)}

    async def send(message: Any) -> None:
        return None

    async def run() -> list[float]:
        times = []
        for _ in range(4):
            start = time.perf_counter()
            await paced(scope, None, send)
            times.append(time.perf_counter() - start)
        return times

    times = asyncio.run(run())
    if bad:
        assert max(times[:2]) < 0.05 and min(times[2:]) >= 0.09  # burst at once, then 10 per second
    else:
        assert max(times) < 0.05


def test_bucket_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="burst"):
        ErrorBuckets(burst=0, per_s=1.0)
    with pytest.raises(ValueError, match="per_s"):
        ErrorBuckets(burst=1, per_s=0.0)
