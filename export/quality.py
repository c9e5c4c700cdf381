"""Caption quality of an exported repository on a held-out SceneWorld split, decoded through the
service's own engine on the embedded onnxruntime backend (what users get), with and without re-ranking."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from service.backends.onnxruntime import OnnxRuntimeBackend
from service.engine.captioning import CaptionEngine
from service.evaluation.metrics import caption_metrics
from service.manifest import load_manifest
from service.text.vocabulary import Vocabulary


async def _decode(
    engine: CaptionEngine, images: np.ndarray, captioner: str, ranker: str | None, beam_size: int, chunk: int
) -> list[str]:
    params = engine.resolve(model=captioner, beam_size=beam_size, rerank=ranker if ranker else False)
    texts: list[str] = []
    for start in tqdm(
        range(0, len(images), chunk), desc=f"eval {captioner}+{ranker or 'none'}", unit="chunk"
    ):
        output = await engine.caption(images[start : start + chunk], params)
        texts.extend(per[0].text for per in output.results)
    return texts


def evaluate_repository(
    repo: Path,
    images: np.ndarray,
    references: Sequence[Sequence[str]],
    runs: Sequence[tuple[str, str | None]],
    beam_size: int = 5,
    chunk: int = 32,
) -> dict[str, dict[str, float | str]]:
    """BLEU-1..4, ROUGE-L and CIDEr-D (DF from these references) per (captioner, ranker) run, and one
    example caption per run."""
    manifest = load_manifest(repo)
    backend = OnnxRuntimeBackend(repo, manifest)
    engine = CaptionEngine(backend, manifest, Vocabulary.load(repo / manifest.vocabulary.file))
    refs = {i: list(r) for i, r in enumerate(references)}
    results: dict[str, dict[str, float | str]] = {}
    try:
        for captioner, ranker in runs:
            texts = asyncio.run(_decode(engine, images, captioner, ranker, beam_size, chunk))
            scores_all = caption_metrics(refs, dict(enumerate(texts)), meteor=False)
            scores: dict[str, float | str] = {
                k: round(float(getattr(scores_all, k)), 4)
                for k in ("bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider_d")
            }
            scores["example"] = texts[0]
            results[f"{captioner}+{ranker}" if ranker else captioner] = scores
    finally:
        asyncio.run(backend.close())
    return results
