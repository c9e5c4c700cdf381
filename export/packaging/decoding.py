"""Bulk decoding for offline work (quality at build time, the studies): an engine on a repository, and
any number of images decoded through it with a progress bar — the served engine path, nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from service.engine.engine import Caption, CaptionEngine
from service.engine.params import SearchParams


async def open_engine(repo: Path, **settings: Any) -> CaptionEngine:
    """``CaptionEngine.from_repo`` (``COMPCAP_*`` settings, then ``settings``); close it after use."""
    return await CaptionEngine.from_repo(repo, **settings)


async def decode(
    engine: CaptionEngine, images: np.ndarray, params: SearchParams, desc: str
) -> list[list[Caption]]:
    """Per image, ``params.n_best`` captions in final order."""
    with tqdm(total=len(images), desc=desc, unit="img") as bar:
        return await engine.caption_many(images, params, progress=bar.update)
