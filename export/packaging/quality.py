"""Caption quality of an exported repository on a held-out SceneWorld split, decoded through the
service's own engine on the embedded onnxruntime backend (what users get), with and without re-ranking."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from export.packaging.decoding import decode, open_engine
from service.engine.engine import CaptionEngine
from service.evaluation.metrics import caption_metrics


async def _decode(
    engine: CaptionEngine, images: np.ndarray, captioner: str, ranker: str | None, beam_size: int
) -> list[str]:
    params = engine.resolve(model=captioner, beam_size=beam_size, rerank=ranker if ranker else False)
    captions = await decode(engine, images, params, f"eval {captioner}+{ranker or 'none'}")
    return [per[0].text for per in captions]


async def _decode_runs(
    repo: Path, images: np.ndarray, runs: Sequence[tuple[str, str | None]], beam_size: int
) -> list[list[str]]:
    async with await open_engine(repo) as engine:
        return [await _decode(engine, images, captioner, ranker, beam_size) for captioner, ranker in runs]


def evaluate_repository(
    repo: Path,
    images: np.ndarray,
    references: Sequence[Sequence[str]],
    runs: Sequence[tuple[str, str | None]],
    beam_size: int = 5,
) -> dict[str, dict[str, float | str]]:
    """BLEU-1..4, ROUGE-L and CIDEr-D (DF from these references) per (captioner, ranker) run, and one
    example caption per run."""
    refs = {i: list(r) for i, r in enumerate(references)}
    results: dict[str, dict[str, float | str]] = {}
    for (captioner, ranker), texts in zip(
        runs, asyncio.run(_decode_runs(repo, images, runs, beam_size)), strict=True
    ):
        scores_all = caption_metrics(refs, dict(enumerate(texts)), meteor=False)
        scores: dict[str, float | str] = {
            k: round(float(getattr(scores_all, k)), 4)
            for k in ("bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider_d")
        }
        scores["example"] = texts[0]
        results[f"{captioner}+{ranker}" if ranker else captioner] = scores
    return results
