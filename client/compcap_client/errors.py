"""What can go wrong, and when a request is tried again — the one place both clients' retries,
timeouts and error mapping live.

``exchange(request)`` is the retry loop written once, without I/O: it yields the request (each
attempt) and ``Sleep`` steps, and receives each attempt's outcome from the transport that drives it
(``CompCapClient`` with ``httpx.Client``, ``AsyncCompCapClient`` with ``httpx.AsyncClient``).
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx

from compcap_client.calls import Flow, Request, Sleep

RETRY_STATUSES = frozenset({429, 503})


class CompCapError(Exception):
    """A failed request: ``status`` (0 when no answer came), ``code`` (the gateway's reason, e.g.
    ``not_an_image``, ``overloaded``), ``message``, the validation ``details`` if any, and the
    ``retry_after`` seconds the gateway asked for, if it did."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.retry_after = retry_after


class CompCapTransportError(CompCapError):
    """No answer: the connection failed or a timeout passed (``code`` ``connect_error``, ``timeout``
    or ``transport_error``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(0, code, message)


def error_from_response(response: httpx.Response) -> CompCapError:
    """The ``CompCapError`` of a 4xx/5xx answer; a body that is not the gateway's error JSON (e.g. a
    proxy's HTML page) gives code ``http_<status>`` and the start of the body as the message."""
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        details = error.get("details")
        return CompCapError(
            response.status_code,
            error["code"],
            str(error.get("message", "")),
            details if isinstance(details, list) else None,
            retry_after,
        )
    if isinstance(body, dict) and isinstance(body.get("detail"), str):  # a plain FastAPI error
        return CompCapError(
            response.status_code, f"http_{response.status_code}", body["detail"], None, retry_after
        )
    text = response.text.strip()[:500] or response.reason_phrase
    return CompCapError(response.status_code, f"http_{response.status_code}", text, None, retry_after)


def transport_error(exc: httpx.TransportError) -> CompCapTransportError:
    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport_error"
    if isinstance(exc, httpx.ConnectError):
        code = "connect_error"
    return CompCapTransportError(code, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds (``"3"``; a decimal is accepted) or
    an HTTP date (seconds from ``now``, at least 0). ``None`` when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """When a request is tried again: on ``statuses`` (503, 429) and on a connection that could not be
    opened; at most ``max_attempts`` attempts in all and ``max_wait_s`` seconds of waiting between
    them. The wait is the answer's ``Retry-After`` if it has one, else ``backoff_s`` × 2^(retry − 1)
    capped at ``max_backoff_s``. ``RetryPolicy(max_attempts=1)`` never retries."""

    max_attempts: int = 5
    max_wait_s: float = 60.0
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    statuses: frozenset[int] = RETRY_STATUSES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_wait_s < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("max_wait_s, backoff_s and max_backoff_s must be >= 0")

    def delay(self, attempt: int, waited_s: float, retry_after: float | None) -> float | None:
        """Seconds to wait before attempt ``attempt + 1`` after attempt ``attempt`` (1-based) failed in a
        retriable way, having waited ``waited_s`` so far; ``None``: give up."""
        if attempt >= self.max_attempts:
            return None
        wait = (
            retry_after
            if retry_after is not None
            else min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        )
        return wait if waited_s + wait <= self.max_wait_s else None


NO_RETRY = RetryPolicy(max_attempts=1)


def exchange(
    request: Request, policy: RetryPolicy, on_retry: Callable[[], object] | None = None
) -> Flow[httpx.Response]:
    """Send ``request`` until it gets a final outcome: the answer (2xx, or a status in ``request.ok``),
    else ``CompCapError`` from the error body or ``CompCapTransportError``. A 503/429 (``policy``'s
    statuses) is retried after its ``Retry-After`` and a connection that never opened after a back-off,
    within the policy's bounds; ``on_retry()`` is called before each retry."""
    waited, attempt = 0.0, 0
    while True:
        attempt += 1
        outcome = yield request
        delay: float | None = None
        if isinstance(outcome, httpx.Response):
            if outcome.status_code in policy.statuses and outcome.status_code not in request.ok:
                delay = policy.delay(attempt, waited, parse_retry_after(outcome.headers.get("retry-after")))
        elif isinstance(outcome, (httpx.ConnectError, httpx.ConnectTimeout)):  # never reached the gateway
            delay = policy.delay(attempt, waited, None)
        if delay is None:
            if isinstance(outcome, httpx.TransportError):
                raise transport_error(outcome) from outcome
            if not isinstance(outcome, httpx.Response):
                raise TypeError(f"a transport answered {type(outcome).__name__}, not a response")
            if outcome.is_success or outcome.status_code in request.ok:
                return outcome
            raise error_from_response(outcome)
        if on_retry is not None:
            on_retry()
        yield Sleep(delay)
        waited += delay


__all__ = [
    "NO_RETRY",
    "RETRY_STATUSES",
    "CompCapError",
    "CompCapTransportError",
    "RetryPolicy",
    "error_from_response",
    "exchange",
    "parse_retry_after",
    "transport_error",
]
