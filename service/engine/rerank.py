"""Re-ranking order of one image's finished captions (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.engine.params import MAX_RERANK_WEIGHT


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
