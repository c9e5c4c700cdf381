"""Re-ranking: from a request's finished beams to its captions in final order.

Three steps, in the order a request meets them:

* ``rank_finished`` (the scheduler) — the ranker scores of finished requests, one batched
  ``<ranker>_image`` + ``<ranker>_text`` call pair per ranker; the only step that calls a model.
* ``rerank_order`` (pure) — one image's candidates ordered by ranker cosine + ``rerank_weight`` ×
  length-normalised log-prob (the BUTR+RR order of Nikolaus et al., 2019, at weight 0); the offline
  studies use it too.
* ``order_captions`` (pure but for ``decode``) — one image's ``n_best`` ``Caption`` records in final
  order: by normalised log-prob (the beam order), or re-ranked when the request has ranker scores.

``rerank_weight`` is bounds-checked in one place, ``service.engine.params.check_rerank_weight``
(``SearchParams`` runs it on every request; ``rerank_order`` runs it for its other callers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.engine.beam import Hypothesis
from service.engine.params import SearchParams, check_rerank_weight
from service.engine.request import Request
from service.engine.runner import ModelRunner


@dataclass(frozen=True)
class Caption:
    """One caption of a response (``CaptionEngine.caption`` re-exports it)."""

    text: str
    tokens: list[int]
    logprob: float
    normalized_logprob: float
    ranker_score: float | None
    beam_rank: int  # 1 = best by normalised log-prob


async def rank_finished(
    runner: ModelRunner,
    requests: Sequence[Request],
    decode: Callable[[list[int]], str] | None = None,
    word_ids: bool = True,
) -> tuple[dict[int, list[list[float]]], dict[int, float], list[tuple[list[Request], Exception]]]:
    """One ``<ranker>_image`` + ``<ranker>_text`` call pair per ranker for every finished request that
    asks for it and whose caller still waits. Returns per request key its scores (per image, per
    hypothesis) and the ms its ranker's calls took, and the groups whose ranker call failed.
    ``word_ids``: the captioner's tokens are the repository's words (a word ranker reads them as they
    are); otherwise, and for a ranker with its own tokenizer, the rankers read the captions' text
    (``decode``)."""
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
        texts = None
        if (not word_ids or runner.manifest.ranker(name).tokens is not None) and decode is not None:
            texts = [[decode(tokens) for tokens in per] for per in captions]
        pixels = runner.manifest.ranker(name).reads == "pixels" or not regions.size
        images = np.concatenate([r.images for r in group]) if pixels else None
        try:
            flat = await runner.rank(name, regions, captions, images, texts)
        except Exception as exc:
            failed.append((group, exc))
            continue
        at = 0
        for request in group:
            scores[request.key] = flat[at : at + request.n_images]
            at += request.n_images
            rerank_ms[request.key] = (time.perf_counter() - start) * 1e3
    return scores, rerank_ms, failed


def rerank_order(
    ranker_scores: Sequence[float], normalized_logprobs: Sequence[float], weight: float = 0.0
) -> list[int]:
    """Indices of one image's B candidates, best first, by ``ranker_score + weight · normalized_logprob``.

    ranker_scores, normalized_logprobs: [B] each, the cosine with the image and the captioner's length-
    normalised log-probability of each candidate. ``weight = 0`` is Nikolaus et al.'s (2019) order (the
    ranker alone); a small positive weight breaks the ranker's near-ties in favour of fluent captions.
    Stable: equal scores keep the beam order."""
    if len(ranker_scores) != len(normalized_logprobs):
        raise ValueError(
            f"ranker_scores has {len(ranker_scores)} values, normalized_logprobs {len(normalized_logprobs)}"
        )
    weight = check_rerank_weight(weight)
    combined = np.asarray(ranker_scores, dtype=np.float64) + weight * np.asarray(
        normalized_logprobs, np.float64
    )
    return [int(i) for i in np.argsort(-combined, kind="stable")]


def order_captions(
    hyps: Sequence[Hypothesis],
    scores: Sequence[float] | None,
    params: SearchParams,
    decode: Callable[[list[int]], str],
) -> list[Caption]:
    """One image's ``params.n_best`` captions in final order. ``hyps``: its finished beams, best
    normalised log-prob first; ``scores``: their ranker scores [B] when the request was re-ranked
    (ordered by ``rerank_order`` with ``params.rerank_weight``), else ``None`` (the beam order);
    ``decode``: token ids to text."""
    order: Sequence[int] = (
        range(len(hyps))
        if scores is None
        else rerank_order(scores, [h.score for h in hyps], params.rerank_weight)
    )
    return [
        Caption(
            text=decode(hyps[i].tokens),
            tokens=hyps[i].tokens,
            logprob=hyps[i].logprob,
            normalized_logprob=hyps[i].score,
            ranker_score=None if scores is None else scores[i],
            beam_rank=i + 1,
        )
        for i in order[: params.n_best]
    ]


__all__ = ["Caption", "order_captions", "rank_finished", "rerank_order"]
