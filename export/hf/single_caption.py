"""The single-caption time an import records (``CaptionerEntry.single_caption_ms``): one image's caption
through the engine as it serves it — the committed repository's graphs on the embedded backend with its
default settings, beam 5, every caption as long as it may be (``min_length`` = ``max_length``: the worst
case) — the median of ``SAMPLES`` after a warm-up, on the machine that imports. A request's deadline
scales with it (``service.engine.deadlines``)."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np

from service.manifest import load_manifest

SAMPLES = 3
BEAM_SIZE = 5


async def _single_caption_ms(repo: Path, name: str) -> float:
    from service.engine.engine import CaptionEngine

    async with await CaptionEngine.from_repo(
        repo, backend="onnxruntime", request_deadline_s=3600.0
    ) as engine:
        params = engine.resolve(model=name, beam_size=BEAM_SIZE)
        params = dataclasses.replace(params, min_length=params.max_length)
        image = engine.manifest.image
        images = np.random.default_rng(0).integers(0, 256, (1, image.height, image.width, 3), dtype=np.uint8)
        await engine.caption(images, params)  # first calls: onnxruntime's allocations, not the caption
        times = []
        for _ in range(SAMPLES):
            start = time.perf_counter()
            await engine.caption(images, params)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def record_single_caption(repo: Path, name: str) -> float:
    """Time captioner ``name`` of ``repo`` (module docstring), write the figure into its manifest entry
    (the manifest replaced atomically) and return it (ms)."""
    from export.probesets.repo import write_manifest

    ms = round(asyncio.run(_single_caption_ms(repo, name)), 1)
    manifest = load_manifest(repo)
    captioners = [
        c.model_copy(update={"single_caption_ms": ms}) if c.name == name else c for c in manifest.captioners
    ]
    write_manifest(repo, manifest.model_copy(update={"captioners": captioners}))
    return ms


__all__ = ["SAMPLES", "record_single_caption"]
