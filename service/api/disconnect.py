"""Stop work for a client that has gone: cancel the awaited work when the connection closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it (the scheduler then frees the
    request's rows before its next step call) and raise ``ClientDisconnected``. A client already gone
    (e.g. one that left while abandon pacing held it back) starts nothing, not even image decoding.
    Call it once the request's body has been read."""
    watcher = asyncio.ensure_future(_disconnected(request))
    task: asyncio.Future[T] | None = None
    try:
        await asyncio.sleep(0)  # its first read: a client already gone answers it at once (no anyio scope)
        if watcher.done():
            raise ClientDisconnected("the client closed the connection")
        task = asyncio.ensure_future(work)
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        if task is not None:
            task.cancel()
        elif asyncio.iscoroutine(work):
            work.close()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise ClientDisconnected("the client closed the connection")
