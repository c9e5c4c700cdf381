"""``EngineClient``: what the API and the features use of the engine, whichever process it runs in.

Two implementations: ``CaptionEngine`` itself (in process: ``make run``, the tests, the offline
studies) and ``service.engine.core_client.RemoteEngine`` (an engine core in another process,
``compcap serve --api-processes N``). Options are resolved and images checked on the client's side
(the same repository, settings and hook registry), so a bad request is refused without a round trip;
the search itself runs wherever the models are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from service.engine.limits import rows_for
from service.engine.observer import StepObserver
from service.engine.params import InvalidParameterError, SearchParams
from service.engine.request import Priority
from service.engine.rerank import Caption
from service.manifest import Manifest
from service.sections import EngineSettings
from service.text.subword import TokenVocabulary


@runtime_checkable
class EngineClient(Protocol):
    """The engine's public API (``CaptionEngine``'s; see ``service.engine.engine``)."""

    @property
    def manifest(self) -> Manifest: ...

    @property
    def vocabs(self) -> Mapping[str, TokenVocabulary]: ...

    @property
    def settings(self) -> EngineSettings: ...

    def resolve(self, **options: Any) -> SearchParams: ...

    def encoder_images(self, model: str, images: np.ndarray) -> np.ndarray: ...

    async def caption(
        self,
        images: np.ndarray,
        params: SearchParams,
        timeout_s: float | None = None,
        priority: Priority = Priority.USER,
        observer: StepObserver | None = None,
    ) -> Any: ...

    async def caption_many(
        self,
        images: np.ndarray,
        params: SearchParams,
        priority: Priority = Priority.BACKGROUND,
        progress: Callable[[int], object] | None = None,
    ) -> list[list[Caption]]: ...

    async def close(self) -> None: ...


def check_request(
    manifest: Manifest, settings: EngineSettings, images: np.ndarray, params: SearchParams
) -> None:
    """Refuse a caption request the engine cannot take, on either side of a process boundary: images
    that are not uint8 [B>=1, H, W, 3] at the repository's size (``ValueError``), or more rows than a
    step call holds (``InvalidParameterError`` on ``beam_size``)."""
    h, w = manifest.image.height, manifest.image.width
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (h, w, 3) or not len(images):
        raise ValueError(f"images must be uint8 [B>=1, {h}, {w}, 3], got {images.dtype} {images.shape}")
    rows = params.rows(len(images))
    if rows > settings.max_rows_per_step:
        raise InvalidParameterError(
            "beam_size",
            f"images × beam_size = {rows} exceeds the scheduler's max_rows = {settings.max_rows_per_step}",
        )


async def caption_in_parts(
    caption: Callable[..., Awaitable[Any]],
    settings: EngineSettings,
    images: np.ndarray,
    params: SearchParams,
    priority: Priority,
    progress: Callable[[int], object] | None = None,
) -> list[list[Caption]]:
    """``caption_many`` on any client's ``caption``: requests of as many images as the row budget of
    ``priority`` allows (a background request must fit the rows users leave it), a few in flight at
    once so that their step calls share the batch; ``progress(n)`` as each request's ``n`` images
    finish."""
    per_request = max(1, min(16, rows_for(settings, priority) // params.beam_size))
    parts = [images[i : i + per_request] for i in range(0, len(images), per_request)]
    fit = max(1, settings.max_rows_per_step // (per_request * params.beam_size))  # decoding at once
    in_flight = asyncio.Semaphore(min(settings.max_queue, 2 * fit))  # as many more being encoded
    timeout = max(settings.request_deadline_s, 3600.0)

    async def one(part: np.ndarray) -> list[list[Caption]]:
        async with in_flight:
            out = await caption(part, params, timeout_s=timeout, priority=priority)
        if progress is not None:
            progress(len(part))
        return list(out.results)

    done = await asyncio.gather(*(one(p) for p in parts))
    return [per for results in done for per in results]


__all__ = ["EngineClient", "caption_in_parts", "check_request"]
