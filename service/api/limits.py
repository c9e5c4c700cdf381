"""Bounds on everything the gateway parses — query strings, JSON bodies, multipart forms, hook
specs. Each check is one cheap pass made *before* the parser it protects, and a breach is a
``LimitError``: a 4xx ``ApiError`` whose code and message name the limit. No input may reach a
``RecursionError`` in a decoder (a 500, and uvicorn then drops the keep-alive connection)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.errors import ApiError, error_response
from service.metrics import Metrics

MAX_JSON_DEPTH: Final = 32  # a caption request needs 6: {hooks: [{params: {pairs: [[...]]}}]}
MAX_JSON_VALUES: Final = 100_000  # strings, arrays, objects and commas in one JSON document
MAX_QUERY_BYTES: Final = 16_384  # the raw query string (h11, nginx: 8-16 KiB request lines)
MAX_QUERY_PARAMS: Final = 64
MAX_FIELD_NAME: Final = 64  # characters in a query parameter or form field name
MAX_FORM_FIELDS: Final = 64  # text fields of a multipart body (files are bounded by the image count)
MAX_FORM_FIELD_BYTES: Final = 65_536  # one text field of a multipart body
MAX_HOOK_PARAM_DEPTH: Final = 8  # containers nested inside one hook's params (``pairs``: 3)
MAX_HOOK_PARAM_VALUES: Final = 10_000  # values inside one hook's params
MAX_HOOK_PARAM_STRING: Final = 256  # characters in one string inside a hook's params


class LimitError(ApiError):
    """A request over one of the bounds above."""


# The scan reads a skeleton of the document: escaped backslashes, then escaped quotes removed (so a
# string's closing quote is the first quote after its opening one), then every byte but the
# structural ones deleted — three passes in C. A lone quote is a string that never ends: invalid
# JSON, which json.loads rejects.
_NOT_STRUCTURAL = bytes(b for b in range(256) if b not in b'"[]{},')
_TOKEN = re.compile(rb'"[^"]*+"|[\[\]{},"]')
_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_QUOTE = ord('"')


def check_json(data: bytes | str, what: str = "the JSON body") -> None:
    """Raise ``LimitError`` if ``data`` nests deeper than ``MAX_JSON_DEPTH`` or holds more than
    ``MAX_JSON_VALUES`` values (strings, arrays, objects, commas), brackets inside strings not
    counted. Linear, and exact on UTF-8 (multi-byte sequences hold no ASCII byte). It does not
    validate: what it lets through, ``json.loads`` parses within the recursion limit or rejects."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if b"\\" in raw:  # a backslash pair is one escaped backslash; a lone one escapes the next byte
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = raw.translate(None, _NOT_STRUCTURAL)
    depth = 0
    for values, token in enumerate(_TOKEN.finditer(skeleton), start=1):
        first = skeleton[token.start()]
        if first == _QUOTE and token.end() - token.start() == 1:
            return  # an unterminated string: invalid JSON, nothing after it is parsed
        if first in _OPEN:
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise LimitError(
                    400, "json_too_deep", f"{what} is nested deeper than the limit of {MAX_JSON_DEPTH} levels"
                )
        elif first in _CLOSE:
            depth -= 1
        if values > MAX_JSON_VALUES:
            raise LimitError(
                413, "json_too_many_values", f"{what} holds more than the limit of {MAX_JSON_VALUES} values"
            )


def check_query(query_string: bytes) -> None:
    """The raw query string: its length, its number of parameters and the length of their names."""
    if len(query_string) > MAX_QUERY_BYTES:
        raise LimitError(
            414,
            "query_too_long",
            f"the query string is {len(query_string)} bytes; the limit is {MAX_QUERY_BYTES}",
        )
    if query_string.count(b"&") >= MAX_QUERY_PARAMS:
        raise LimitError(
            400, "too_many_query_params", f"more than the limit of {MAX_QUERY_PARAMS} query parameters"
        )
    check_field_names(
        (key for key, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)), "query"
    )


def check_field_names(names: Iterable[str], where: str) -> None:
    """Field names are echoed in errors: a long one is refused before it is."""
    for name in names:
        if len(name) > MAX_FIELD_NAME:
            raise LimitError(
                400,
                "field_name_too_long",
                f"a {where} field name is {len(name)} characters; the limit is {MAX_FIELD_NAME}",
            )


def check_hook_params(params: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` (a 422 naming ``hooks.<i>.params``) if one hook's params nest deeper than
    ``MAX_HOOK_PARAM_DEPTH``, hold more than ``MAX_HOOK_PARAM_VALUES`` values or a string longer
    than ``MAX_HOOK_PARAM_STRING``. Iterative: no recursion whatever the input."""
    stack: list[tuple[Any, int]] = [(params, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_HOOK_PARAM_VALUES:
            raise ValueError(f"more than the limit of {MAX_HOOK_PARAM_VALUES} values in a hook's params")
        if isinstance(value, Mapping):
            children: Sequence[Any] = [*value.keys(), *value.values()]
        elif isinstance(value, list | tuple):
            children = value
        else:
            if isinstance(value, str) and len(value) > MAX_HOOK_PARAM_STRING:
                raise ValueError(f"a string of {len(value)} characters; the limit is {MAX_HOOK_PARAM_STRING}")
            continue
        if depth > MAX_HOOK_PARAM_DEPTH:
            raise ValueError(f"nested deeper than the limit of {MAX_HOOK_PARAM_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


async def bounded_stream(
    stream: AsyncIterator[bytes], limit: int, idle_s: float | None = None
) -> AsyncGenerator[bytes, None]:
    """``stream`` (a request body) that raises a 413 ``LimitError`` once it passes ``limit`` bytes:
    a body without Content-Length (chunked) is bounded as it arrives, not after it is buffered. With
    ``idle_s``, a 408 ``LimitError`` when no part of the body arrives for that long: a client that
    stops halfway through its upload does not hold the request (and a stopping gateway) open."""
    size = 0
    chunks = aiter(stream)
    while True:
        try:
            async with asyncio.timeout(idle_s):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            message = f"no part of the request body arrived for {idle_s:g} s"
            raise LimitError(408, "body_timeout", message) from None
        size += len(chunk)
        if size > limit:
            raise LimitError(413, "request_too_large", f"the request body is over the limit of {limit} bytes")
        yield chunk


class QueryLimitMiddleware:
    """Reject an oversized query string before anything parses it (FastAPI parses the query string
    of every request while it resolves a route's parameters)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                check_query(scope.get("query_string", b""))
            except LimitError as exc:
                self.metrics.errors.labels(reason=exc.code).inc()
                await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
                return
        await self.app(scope, receive, send)
