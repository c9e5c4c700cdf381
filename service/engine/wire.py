"""The messages between API processes and an engine core (``compcap serve --api-processes N``): plain
data, msgpack-encoded (msgspec), one length-prefixed frame each over a Unix-domain socket.

Nothing live crosses: images are bytes with their shape, a request's search is its resolved options
(``SearchParams.options()``: the core resolves them again, hooks included, from the same registry and
repository), a deadline is a timeout, cancellation is a ``Cancel`` message, a step observer is the
request asking for its per-step ``StepEvent`` s (``observe``), which the core streams back as ``Step``
messages before the request's ``Done`` (or ``Failed``). vLLM v1's ``EngineCoreClient`` has the same
shape (msgspec messages; in-process or one core per device).

| message | from | |
|---|---|---|
| ``Hello`` | core | on connecting: the core's process id, backend and model devices |
| ``Submit`` | API | caption ``images`` with ``options`` within ``timeout_s`` at ``priority``; ``observe`` |
| ``Cancel`` | API | the client left, or its deadline passed: stop request ``id`` |
| ``Step`` | core | one decoding step of request ``id`` (only when it asked to ``observe``) |
| ``Done`` | core | its captions, timings, step count and in-domain judgement |
| ``Failed`` | core | why not: the engine's error kind (``invalid_parameter``, ``unknown_model``, |
| | | ``overloaded`` with ``retry_after_s``, ``timeout``, ``backend``, ``bad_request``, ``internal``) |
| ``Reload`` | API | the repository may have changed (``POST /v1/admin/reload``, the watch): reload it |
| ``Reloaded`` | core | the version of the repository it now serves (or a ``Failed``: it keeps the old) |
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgspec
import numpy as np

FRAME = struct.Struct("!I")  # payload length, then the msgpack payload
MAX_FRAME = 1 << 30  # a request's images (at most max_images_per_request of them) fit far below


class Array(msgspec.Struct, array_like=True):
    """A numpy array as plain data."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes


def pack(array: np.ndarray) -> Array:
    a = np.ascontiguousarray(array)
    return Array(a.dtype.str, tuple(int(d) for d in a.shape), a.tobytes())


def unpack(array: Array) -> np.ndarray:
    """The array (read-only: a view of the message's bytes)."""
    return np.frombuffer(array.data, dtype=np.dtype(array.dtype)).reshape(array.shape)


class Hello(msgspec.Struct, tag="hello"):
    pid: int
    backend: str
    devices: dict[str, str]


class Submit(msgspec.Struct, tag="submit"):
    id: int
    images: Array
    options: dict[str, Any]
    timeout_s: float
    priority: int
    observe: bool = False


class Cancel(msgspec.Struct, tag="cancel"):
    id: int


class Step(msgspec.Struct, tag="step"):
    """``service.engine.observer.StepEvent``'s fields, as arrays (``attention`` may be absent)."""

    id: int
    fields: dict[str, Array]


# a caption (``service.engine.rerank.Caption``) crosses as the tuple of its fields in their
# order, a msgpack array as an array-like struct would be: ``dataclasses.astuple`` writes it,
# ``Caption(*fields)`` reads it back
WireCaption = tuple[str, list[int], float, float, float | None, int]


class Done(msgspec.Struct, tag="done"):
    id: int
    results: list[list[WireCaption]]
    timings_ms: dict[str, float]
    iterations: int
    domain: tuple[list[float], list[bool]] | None = None


class Failed(msgspec.Struct, tag="failed"):
    id: int
    kind: str
    message: str
    field: str | None = None
    retry_after_s: float | None = None


class Reload(msgspec.Struct, tag="reload"):
    """Reload the repository (``service.api.reload``): when its files changed since the core loaded it,
    or, with ``force``, when ``generation`` (the reload asked of every replica) is newer than the last one
    the core acted on."""

    id: int
    force: bool = False
    generation: int = 0


class Reloaded(msgspec.Struct, tag="reloaded"):
    """The core serves the repository at ``version`` (``models``: it loaded them again for this)."""

    id: int
    version: str
    models: bool


Message = Hello | Submit | Cancel | Step | Done | Failed | Reload | Reloaded

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def frame(message: Message) -> bytes:
    """One message as a frame (length prefix + payload)."""
    payload = _encoder.encode(message)
    return FRAME.pack(len(payload)) + payload


async def read_message(reader: asyncio.StreamReader) -> Message | None:
    """The next message, or None at the end of the stream. ``ValueError`` for a frame that is too
    long or does not decode."""
    try:
        head = await reader.readexactly(FRAME.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ValueError("the stream ended inside a frame header") from None
        return None
    (length,) = FRAME.unpack(head)
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ValueError("the stream ended inside a frame") from None
    try:
        return _decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"undecodable message: {exc}") from None


__all__ = [
    "Array",
    "Cancel",
    "Done",
    "Failed",
    "Hello",
    "Message",
    "Step",
    "Submit",
    "WireCaption",
    "frame",
    "pack",
    "read_message",
    "unpack",
]
