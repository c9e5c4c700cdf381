"""What a feature refuses, and the one gate that bounds its work. Pure: no HTTP here; the kit's
``handlers`` turns every ``RequestError`` into an ``errors`` response.

- ``RequestError``: a request a feature (or the kit) refuses — ``status`` 4xx/5xx, ``code``,
  ``message``, the request ``field`` at fault (shown as ``details``) and response ``headers``. Features
  raise it from their services; none registers a handler of its own.
- ``BusyError``: the ``RequestError`` of a full gate — 429 with ``Retry-After`` (whole seconds).
- ``BoundedGate``: at most ``limit`` holders at once (explanations, comparisons, probe jobs); one more
  is refused with a ``BusyError`` at once, never queued. A holder is a ``hold()`` block (released on
  return, exception or cancellation) or an ``acquire()`` whose release outlives the call (a job)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from service.checks import integer_at_least


class RequestError(Exception):
    """A refused request: ``status``, ``code``, ``message``; ``field`` at fault and ``headers``, if any."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.field = field  # the request field at fault, when one is


class BusyError(RequestError):
    """A full gate: 429 ``code`` with ``Retry-After`` = ``retry_after_s`` rounded to whole seconds."""

    def __init__(self, code: str, message: str, retry_after_s: float) -> None:
        super().__init__(429, code, message, {"Retry-After": str(round(retry_after_s))})
        self.retry_after_s = retry_after_s


class BoundedGate:
    """At most ``limit`` holders at once; the next is refused with ``BusyError(code, message)``.

    ``message`` is a ``str.format`` template over ``limit`` and ``retry_after_s``. The retry hint is
    ``retry_after()`` when given, else the seconds the last holder held the gate, rounded up (at least 1;
    1 before any has)."""

    def __init__(
        self,
        limit: int,
        code: str,
        message: str,
        retry_after: Callable[[], float] | None = None,
    ) -> None:
        integer_at_least(1, limit=limit)
        if not code:
            raise ValueError("code must be a non-empty error code")
        self.limit, self.code, self.message = limit, code, message
        self._retry_after = retry_after
        self.held = 0  # holders now (``acquire(force=True)`` may take it past ``limit``)
        self.last_s = 1.0  # how long the last holder held the gate

    @property
    def full(self) -> bool:
        return self.held >= self.limit

    def retry_after_s(self) -> float:
        """Seconds a refused caller should wait before it tries again."""
        if self._retry_after is not None:
            return self._retry_after()
        return max(1.0, math.ceil(self.last_s))

    def acquire(self, force: bool = False) -> Callable[[], None]:
        """Take a place, or raise ``BusyError`` when ``limit`` are held (``force``: take one anyway —
        work the service starts itself, counted but never refused). Returns the release: call it once
        the work ends; a second call does nothing."""
        if not force and self.full:
            retry = self.retry_after_s()
            raise BusyError(self.code, self.message.format(limit=self.limit, retry_after_s=retry), retry)
        self.held += 1
        start = time.perf_counter()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.held -= 1
                self.last_s = time.perf_counter() - start

        return release

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """``async with gate.hold():`` the block holds a place (``BusyError`` when none is free)."""
        release = self.acquire()
        try:
            yield
        finally:
            release()


__all__ = ["BoundedGate", "BusyError", "RequestError"]
