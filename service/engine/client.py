"""``EngineClient``: what the API and the features use of the engine, whichever process it runs in.

Two implementations: ``CaptionEngine`` itself (in process: ``make run``, the tests, the offline
studies) and ``service.engine.core_client.RemoteEngine`` (an engine core in another process,
``compcap serve --api-processes N``). Options are resolved and images checked on the client's side
(the same repository, settings and hook registry), so a bad request is refused without a round trip;
the search itself runs wherever the models are. That caller's side is written once, in
``EngineClient``, which both implementations extend.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from service.engine.deadlines import request_deadline_s
from service.engine.limits import rows_for
from service.engine.observer import StepObserver
from service.engine.params import InvalidParameterError, SearchParams, resolve_params
from service.engine.request import Priority
from service.engine.rerank import Caption
from service.engine.runner import prepare_images
from service.engine.settings import EngineSettings
from service.manifest import Manifest
from service.text.subword import TokenVocabulary


@dataclass
class CaptionOutput:
    """What ``EngineClient.caption`` answers."""

    params: SearchParams
    results: list[list[Caption]]  # per image, final order (ranker order if re-ranked), n_best each
    timings_ms: dict[str, float] = field(default_factory=dict)  # queue, encode, decode, rerank
    iterations: int = 0  # step calls the request took part in
    domain: tuple[list[float], list[bool]] | None = None  # per image: typicality score, in domain


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
    timeout = max(settings.request_deadline_s or 0.0, 3600.0)

    async def one(part: np.ndarray) -> list[list[Caption]]:
        async with in_flight:
            out = await caption(part, params, timeout_s=timeout, priority=priority)
        if progress is not None:
            progress(len(part))
        return list(out.results)

    done = await asyncio.gather(*(one(p) for p in parts))
    return [per for results in done for per in results]


class Checked(NamedTuple):
    """A caption request ``EngineClient.caption`` has checked, with its deadline set."""

    images: np.ndarray
    params: SearchParams
    timeout_s: float
    priority: Priority
    observer: StepObserver | None


class EngineClient(ABC):
    """The engine's public API (see module docstring), and the caller's side of it, the same in process
    and across one: options resolved, images prepared for an encoder, a request checked and its
    deadline set before ``_submit`` (what differs: a scheduler here, a frame to the engine core there),
    many images captioned in parts. A subclass sets ``manifest``, ``vocabs`` and ``settings``."""

    manifest: Manifest
    vocabs: Mapping[str, TokenVocabulary]
    settings: EngineSettings

    def resolve(self, **options: Any) -> SearchParams:
        """Validate request options (``model``, ``beam_size``, ``max_length``, ``n_best``, ``rerank``,
        ``length_penalty``, ``hooks``, ``rerank_weight``) into ``SearchParams``; ``EngineError`` names
        the option at fault."""
        return resolve_params(self.manifest, self.vocabs, self.settings, **options)

    def encoder_images(self, model: str, images: np.ndarray) -> np.ndarray:
        """uint8 images [N, H, W, 3] as captioner ``model``'s own encoder reads them (resized, or
        resized and centre-cropped: contract v2); unchanged for a captioner of the shared encoder."""
        pre = self.manifest.captioner(model).image
        return images if pre is None else prepare_images(images, pre)

    async def caption(
        self,
        images: np.ndarray,
        params: SearchParams,
        timeout_s: float | None = None,
        priority: Priority = Priority.USER,
        observer: StepObserver | None = None,
    ) -> CaptionOutput:
        """Caption uint8 [B, H, W, 3] images within ``timeout_s`` (default: its captioner's request
        deadline, ``service.engine.deadlines``; ``TimeoutError`` after it). ``observer`` gets this
        request's ``StepEvent`` at every step."""
        check_request(self.manifest, self.settings, images, params)
        if timeout_s is None:
            timeout = request_deadline_s(self.settings, self.manifest.captioner(params.model))
        else:
            timeout = timeout_s
        return await self._submit(Checked(images, params, timeout, priority, observer))

    @abstractmethod
    async def _submit(self, request: Checked) -> CaptionOutput:
        """Decode a checked request within its ``timeout_s``."""

    async def caption_many(
        self,
        images: np.ndarray,
        params: SearchParams,
        priority: Priority = Priority.BACKGROUND,
        progress: Callable[[int], object] | None = None,
    ) -> list[list[Caption]]:
        """Caption any number of images (offline studies, probes, benchmarks): requests of as many
        images as the row budget of ``priority`` allows, a few in flight at once so that their step
        calls share the batch (``caption_in_parts``). ``progress(n)`` is called as each request's ``n``
        images finish."""
        return await caption_in_parts(self.caption, self.settings, images, params, priority, progress)

    @abstractmethod
    async def close(self) -> None:
        """Free what the client holds."""


__all__ = ["CaptionOutput", "Checked", "EngineClient", "caption_in_parts", "check_request"]
