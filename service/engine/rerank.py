"""Re-ranking of finished captions with a visual–semantic ranker (cosine of L2-normalised embeddings)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from service.backends.base import Backend
from service.manifest import Manifest, RankerEntry

MAX_RERANK_WEIGHT = 10.0


def rerank_order(
    ranker_scores: Sequence[float], normalized_logprobs: Sequence[float], weight: float = 0.0
) -> list[int]:
    """Indices of one image's B candidates, best first, by ``ranker_score + weight · normalized_logprob``.

    ranker_scores, normalized_logprobs: [B] each, the cosine with the image and the captioner's length-
    normalised log-probability of each candidate. ``weight = 0`` is seed 000's order (the ranker alone);
    a small positive weight breaks the ranker's near-ties in favour of fluent captions. Stable: equal
    scores keep the beam order."""
    if len(ranker_scores) != len(normalized_logprobs):
        raise ValueError(
            f"ranker_scores has {len(ranker_scores)} values, normalized_logprobs {len(normalized_logprobs)}"
        )
    if not 0.0 <= weight <= MAX_RERANK_WEIGHT:
        raise ValueError(f"weight must be in [0, {MAX_RERANK_WEIGHT}], got {weight}")
    combined = np.asarray(ranker_scores, dtype=np.float64) + weight * np.asarray(
        normalized_logprobs, np.float64
    )
    return [int(i) for i in np.argsort(-combined, kind="stable")]


def text_batch(
    captions: Sequence[Sequence[int]], bos: int, pad: int, fixed_length: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Ranker text input: ``tokens`` int64 [C, T] = BOS w1..wn PAD..., ``length`` int64 [C, 1] = n + 1.
    ``fixed_length`` pads to (and cuts at) a model's fixed T."""
    width = fixed_length if fixed_length else 1 + max((len(c) for c in captions), default=0)
    tokens = np.full((len(captions), width), pad, dtype=np.int64)
    length = np.zeros((len(captions), 1), dtype=np.int64)
    tokens[:, 0] = bos
    for row, words in enumerate(captions):
        words = list(words)[: width - 1]
        tokens[row, 1 : 1 + len(words)] = words
        length[row, 0] = len(words) + 1
    return tokens, length


def fixed_dim(manifest: Manifest, model: str, tensor: str, axis: int) -> int | None:
    """The fixed size of ``tensor``'s ``axis`` (manifest dims, batch excluded) or None if variable."""
    for spec in manifest.model(model).inputs:
        if spec.name == tensor and len(spec.dims) > axis and spec.dims[axis] > 0:
            return spec.dims[axis]
    return None


async def ranker_scores(
    backend: Backend,
    manifest: Manifest,
    ranker: RankerEntry,
    regions: np.ndarray,
    captions: Sequence[Sequence[Sequence[int]]],
) -> list[list[float]]:
    """Cosine between each image (``regions`` [B,R,D]) and each of its captions (word ids, no BOS/EOS).

    One ``<ranker>_image`` call for all images and one ``<ranker>_text`` call for all captions."""
    flat = [c for per_image in captions for c in per_image]
    owner = np.repeat(np.arange(len(captions)), [len(c) for c in captions])
    if not flat:
        return [[] for _ in captions]
    tokens, length = text_batch(
        flat,
        manifest.vocabulary.bos_id,
        manifest.vocabulary.pad_id,
        fixed_dim(manifest, ranker.text, "tokens", 0),
    )
    image_out, text_out = await asyncio.gather(
        backend.infer(ranker.image, {"regions": regions}),
        backend.infer(ranker.text, {"tokens": tokens, "length": length}),
    )
    image_emb = np.asarray(image_out["embedding"], dtype=np.float32)
    text_emb = np.asarray(text_out["embedding"], dtype=np.float32)
    scores = np.einsum("cj,cj->c", text_emb, image_emb[owner])
    out: list[list[float]] = []
    start = 0
    for per_image in captions:
        out.append([float(s) for s in scores[start : start + len(per_image)]])
        start += len(per_image)
    return out
