"""The kit's one gate for bounded work (``service/api/gate.py``): a full gate refuses with a 429
``BusyError`` and its ``Retry-After``; a place is given back on return, on an exception and on
cancellation; the limit is checked; and the kit's single handler renders any ``RequestError``."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api.errors import ApiError
from service.api.gate import BoundedGate, BusyError, RequestError
from service.api.handlers import install_error_handlers
from service.metrics import Metrics


def gate(limit: int = 2, **kwargs: object) -> BoundedGate:
    return BoundedGate(limit, "too_many_things", "{limit} things are running; retry later", **kwargs)  # type: ignore[arg-type]


def test_a_full_gate_refuses_with_a_busy_error_and_retry_after() -> None:
    g = gate(2)
    first, second = g.acquire(), g.acquire()
    assert g.held == 2 and g.full
    with pytest.raises(BusyError) as busy:
        g.acquire()
    err = busy.value
    assert isinstance(err, RequestError) and err.status == 429 and err.code == "too_many_things"
    assert err.message == "2 things are running; retry later" and err.field is None
    assert err.retry_after_s == 1.0 and err.headers == {"Retry-After": "1"}  # no holder has finished yet
    assert g.held == 2  # a refusal takes nothing
    first()
    first()  # a second release does nothing
    assert g.held == 1 and not g.full
    g.acquire()()
    second()
    assert g.held == 0


def test_the_retry_hint_is_the_last_hold_rounded_up_or_the_given_one() -> None:
    g = gate(1)
    g.last_s = 2.2
    release = g.acquire()
    with pytest.raises(BusyError) as busy:
        g.acquire()
    assert busy.value.retry_after_s == 3.0 and busy.value.headers["Retry-After"] == "3"
    release()
    assert g.last_s < 1.0  # the hold just ended took no time
    assert g.retry_after_s() == 1.0  # never less than a second
    hinted = BoundedGate(1, "busy", "{limit} running; retry after {retry_after_s:.0f} s", lambda: 41.6)
    hinted.acquire()
    with pytest.raises(BusyError) as busy:
        hinted.acquire()
    assert busy.value.message == "1 running; retry after 42 s" and busy.value.headers["Retry-After"] == "42"


def test_force_takes_a_place_past_the_limit_and_counts() -> None:
    g = gate(1)
    g.acquire()
    forced = g.acquire(force=True)
    assert g.held == 2
    forced()
    with pytest.raises(BusyError):
        g.acquire()


def test_hold_gives_the_place_back_on_return_exception_and_cancellation() -> None:
    async def run() -> None:
        g = gate(1)
        async with g.hold():
            assert g.held == 1
            with pytest.raises(BusyError):
                async with g.hold():
                    pass  # pragma: no cover - refused before the block
        assert g.held == 0

        with pytest.raises(RuntimeError):
            async with g.hold():
                raise RuntimeError("the work failed")
        assert g.held == 0

        started = asyncio.Event()

        async def work() -> None:
            async with g.hold():
                started.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(work())
        await started.wait()
        assert g.held == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert g.held == 0

    asyncio.run(run())


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_the_limit_is_checked(limit: object) -> None:
    with pytest.raises(ValueError, match="limit"):
        gate(limit)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="code"):
        BoundedGate(1, "", "busy")


def test_one_handler_answers_every_request_error() -> None:
    app = FastAPI()
    install_error_handlers(app, Metrics())
    g = gate(1)
    g.acquire()

    @app.get("/busy")
    async def busy() -> None:
        g.acquire()

    @app.get("/refused")
    async def refused() -> None:
        raise RequestError(422, "invalid_thing", "thing must be small", field="thing")

    @app.get("/kit")
    async def kit() -> None:
        raise ApiError(404, "not_here", "nothing here")

    client = TestClient(app)
    r = client.get("/busy")
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    assert r.content == b'{"error":{"code":"too_many_things","message":"1 things are running; retry later"}}'
    r = client.get("/refused")
    assert r.status_code == 422 and "retry-after" not in r.headers
    assert r.json() == {
        "error": {
            "code": "invalid_thing",
            "message": "thing must be small",
            "details": [{"field": "thing", "message": "thing must be small"}],
        }
    }
    r = client.get("/kit")
    assert r.status_code == 404 and r.json() == {"error": {"code": "not_here", "message": "nothing here"}}
