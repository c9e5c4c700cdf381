"""A request whose hook asks for the captions without it too (``synonym_substitution``'s
``return_original``, ``SearchParams.compare_without``): the request as asked (S) and the same request
without that hook (O), two ordinary searches decoded concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np

from service.engine.client import EngineClient
from service.engine.engine import Caption, CaptionOutput
from service.engine.params import SearchParams


def resolve_with_original(
    engine: EngineClient, options: Mapping[str, Any]
) -> tuple[SearchParams, SearchParams | None]:
    """Request options → the params of the request as asked and, when one of its hooks asks for the
    captions without it, of the same request without that hook."""
    params = engine.resolve(**options)
    if params.compare_without is None:
        return params, None
    hooks = list(options["hooks"])
    del hooks[params.compare_without]
    return params, engine.resolve(**{**options, "hooks": hooks})


async def caption_with_original(
    engine: EngineClient,
    images: np.ndarray,
    params: SearchParams,
    original: SearchParams | None,
    timeout_s: float | None = None,
) -> tuple[CaptionOutput, list[list[Caption]] | None]:
    """Decode the request (and its original, concurrently); the request's output and the original's
    captions."""
    if original is None:
        return await engine.caption(images, params, timeout_s), None
    s, o = await asyncio.gather(
        engine.caption(images, params, timeout_s), engine.caption(images, original, timeout_s)
    )
    return s, o.results
