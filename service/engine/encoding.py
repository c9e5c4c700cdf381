"""How one admitted group of requests is cut into encoder calls.

With ``max_images`` > 0 the group is encoded in chunks of at most ``max_images`` images (a request
larger than that is a chunk of its own; a request's images are never split), smallest requests first
and in admission order among equals. The scheduler runs the chunks one after another, lets each
chunk's requests join the decoding batch as soon as it is encoded, and drops requests whose caller
left before their chunk started: their images are never encoded. 0 keeps one call for the whole
group (the cheapest per image, but every request in it waits for the largest)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class _Sized(Protocol):
    @property
    def n_images(self) -> int: ...


R = TypeVar("R", bound=_Sized)


def encode_chunks(requests: Sequence[R], max_images: int) -> list[list[R]]:
    """``requests`` (in admission order) as encoder calls: lists of requests, each list's images at
    most ``max_images`` unless it is one larger request; every request exactly once."""
    if max_images < 0:
        raise ValueError(f"max_images must be >= 0, got {max_images}")
    if max_images == 0 or len(requests) <= 1:
        return [list(requests)] if requests else []
    order = sorted(range(len(requests)), key=lambda i: (requests[i].n_images, i))
    chunks: list[list[R]] = []
    current: list[R] = []
    images = 0
    for i in order:
        request = requests[i]
        if current and images + request.n_images > max_images:
            chunks.append(current)
            current, images = [], 0
        current.append(request)
        images += request.n_images
    chunks.append(current)
    return chunks


__all__ = ["encode_chunks"]
