"""The re-ranking stage's model calls: the ranker scores of finished requests, batched per ranker."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from service.engine.request import Request
from service.engine.runner import ModelRunner


async def rank_finished(
    runner: ModelRunner, requests: Sequence[Request]
) -> tuple[dict[int, list[list[float]]], dict[int, float], list[tuple[list[Request], Exception]]]:
    """One ``<ranker>_image`` + ``<ranker>_text`` call pair per ranker for every finished request that
    asks for it and whose caller still waits. Returns per request key its scores (per image, per
    hypothesis) and the ms its ranker's calls took, and the groups whose ranker call failed."""
    scores: dict[int, list[list[float]]] = {}
    rerank_ms: dict[int, float] = {}
    failed: list[tuple[list[Request], Exception]] = []
    by_ranker: dict[str, list[Request]] = {}
    for request in requests:
        if request.params.ranker is not None and not request.future.done():
            by_ranker.setdefault(request.params.ranker, []).append(request)
    for name, group in by_ranker.items():
        start = time.perf_counter()
        regions = np.concatenate([r.encoded.regions for r in group if r.encoded is not None])
        captions = [[h.tokens for h in per] for r in group for per in r.hypotheses or []]
        try:
            flat = await runner.rank(name, regions, captions)
        except Exception as exc:
            failed.append((group, exc))
            continue
        at = 0
        for request in group:
            scores[request.key] = flat[at : at + request.n_images]
            at += request.n_images
            rerank_ms[request.key] = (time.perf_counter() - start) * 1e3
    return scores, rerank_ms, failed


__all__ = ["rank_finished"]
