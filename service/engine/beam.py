"""Beam-search arithmetic, pure and vectorised: selection of the next beams, diverse (grouped)
selection, length normalisation and reading hypotheses out of a finished pool.

``service.engine.beam_batch.BeamBatch`` runs every live request's search with these functions; the
per-request ``BeamSearch`` in ``tests/beam_oracle.py`` is the readable reference it is checked against.

Scores: ``score = sum log-prob / length ** length_penalty`` where ``length`` counts words (EOS is not
counted; at least 1). Diverse beam search (Vijayakumar et al. 2018, Hamming diversity): with
``groups`` G > 1 the K beams of an image are G groups of K/G consecutive columns; group g picks its
top K/G continuations from its own beams by ``cum + log p(w) - diversity_penalty * c_g(w)``, where
``c_g(w)`` counts how often word ``w`` was picked by groups 0..g-1 of the same image at this step; the
stored cumulative log-prob (and so every score) stays the unpenalised model log-prob.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

NEG_INF = -np.inf

# logits_hook(tokens int64 [N, t+1], logprobs float [N, V]) -> logprobs float [N, V]
LogitsHookFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Hypothesis:
    """One finished caption: word ids (no BOS/EOS), summed log-prob (EOS included), score."""

    tokens: list[int]
    logprob: float
    score: float


@dataclass(frozen=True)
class Selection:
    """Result of ``beam_step`` for ``I`` images and ``K`` beams."""

    parent: np.ndarray  # int64 [I, K]: beam (0..K-1) each new beam extends
    token: np.ndarray  # int64 [I, K]: the word appended
    cum: np.ndarray  # float64 [I, K]: new cumulative log-prob (-inf: dead beam)
    eos_cum: np.ndarray  # float64 [I, K]: cumulative log-prob of ending beam k with EOS now


def length_norm(length: np.ndarray | int, length_penalty: float) -> np.ndarray:
    """``max(length, 1) ** length_penalty`` as float64."""
    return np.maximum(np.asarray(length, dtype=np.float64), 1.0) ** length_penalty


def beam_step(cum: np.ndarray, logprobs: np.ndarray, eos: int) -> Selection:
    """Select the next beams of every image.

    cum: float64 [I, K] cumulative log-prob of each beam (-inf for dead beams).
    logprobs: float [I, K, V] next-token log-probs (rows of dead beams are ignored).
    Returns the top-``K`` non-EOS continuations per image (sorted, best first) and each beam's
    EOS continuation score. Pure function.
    """
    n_images, k, v = logprobs.shape
    if cum.shape != (n_images, k):
        raise ValueError(f"cum must have shape {(n_images, k)}, got {cum.shape}")
    total = cum[:, :, None] + np.asarray(logprobs, dtype=np.float64)  # [I, K, V], a new array
    total[~np.isfinite(cum)] = NEG_INF
    eos_cum = total[:, :, eos].copy()
    total[:, :, eos] = NEG_INF
    flat = total.reshape(n_images, k * v)
    top = (
        np.argpartition(-flat, k - 1, axis=1)[:, :k]
        if k < k * v
        else np.arange(k * v)[None].repeat(n_images, 0)
    )
    grid = np.arange(n_images)[:, None]  # fancy indexing: take_along_axis's index building costs more
    top_cum = flat[grid, top]
    order = np.argsort(-top_cum, axis=1, kind="stable")
    top = top[grid, order]
    top_cum = top_cum[grid, order]
    return Selection(parent=top // v, token=top % v, cum=top_cum, eos_cum=eos_cum)


def grouped_beam_step(
    cum: np.ndarray, logprobs: np.ndarray, eos: int, groups: int, diversity_penalty: float
) -> Selection:
    """``beam_step`` for diverse beam search (see module docstring): the ``K`` beams of an image are
    ``groups`` groups of ``K // groups`` consecutive beams; group ``g`` selects its ``K // groups``
    continuations among its own beams with each word's log-prob lowered by ``diversity_penalty`` times
    the number of times groups ``< g`` of the same image selected that word at this step. The returned
    ``cum`` is the unpenalised cumulative log-prob; ``parent`` indexes all ``K`` beams. Pure function;
    ``groups=1`` returns exactly ``beam_step``'s selection."""
    n_images, k, v = logprobs.shape
    if groups < 1 or k % groups:
        raise ValueError(f"groups must divide the beam size {k}, got {groups}")
    if groups == 1:
        return beam_step(cum, logprobs, eos)
    if cum.shape != (n_images, k):
        raise ValueError(f"cum must have shape {(n_images, k)}, got {cum.shape}")
    b = k // groups
    grid = np.arange(n_images)[:, None]
    chosen = np.zeros((n_images, v), dtype=np.float64)  # times each word was picked by earlier groups
    parts: list[Selection] = []
    for g in range(groups):
        cols = slice(g * b, (g + 1) * b)
        own = logprobs[:, cols].astype(np.float64)  # [I, B, V]
        penalised = own - diversity_penalty * chosen[:, None, :] if g and diversity_penalty else own
        sel = beam_step(cum[:, cols], penalised, eos)
        live = np.isfinite(sel.cum)
        true_cum = cum[:, cols][grid, sel.parent] + own[grid, sel.parent, sel.token]
        np.add.at(chosen, (np.broadcast_to(grid, live.shape)[live], sel.token[live]), 1.0)
        parts.append(
            Selection(
                parent=sel.parent + g * b,
                token=sel.token,
                cum=np.where(live, true_cum, NEG_INF),
                eos_cum=sel.eos_cum,
            )
        )
    return Selection(
        parent=np.concatenate([p.parent for p in parts], axis=1),
        token=np.concatenate([p.token for p in parts], axis=1),
        cum=np.concatenate([p.cum for p in parts], axis=1),
        eos_cum=np.concatenate([p.eos_cum for p in parts], axis=1),
    )


def transformers_finishing(
    sel_cum: np.ndarray, eos_cum: np.ndarray, beam: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``generate()``'s beam search: of the 2K best continuations only those ranked in the first K may
    finish. ``sel_cum`` [I, C]: the K best non-end continuations (sorted, ``-inf`` past K); ``eos_cum``
    [I, C]: each beam's end continuation; ``beam`` [I]: K per image. The K best of all continuations
    are the K best of those 2K. Returns (``eos_cum`` with the end continuations outside the K best
    ``-inf``, the K-th best continuation per image [I]). Pure function."""
    union = np.concatenate([sel_cum, eos_cum], axis=1)
    kth = -np.sort(-union, axis=1)[np.arange(union.shape[0]), beam - 1]
    return np.where(eos_cum >= kth[:, None], eos_cum, NEG_INF), kth


def transformers_done(
    pool_full: np.ndarray, best_possible: np.ndarray, worst: np.ndarray, early_stopping: np.ndarray
) -> np.ndarray:
    """``generate()``'s stop per image [I]: with ``early_stopping`` as soon as K captions are finished;
    without, once they are and the best live beam's score at its current length (``best_possible``)
    cannot beat the worst of them (its heuristic: a later, longer caption is not looked for). Pure."""
    return np.where(early_stopping, pool_full, pool_full & (best_possible <= worst))


def pool_hypotheses(
    fin_tokens: np.ndarray,
    fin_len: np.ndarray,
    fin_cum: np.ndarray,
    fin_score: np.ndarray,
    image: int,
    n_best: int,
) -> list[Hypothesis]:
    """The first ``n_best`` finished hypotheses of ``image`` from a pool kept best first
    (``fin_tokens`` int64 [I, K, L], ``fin_len`` int64 [I, K], ``fin_cum``/``fin_score`` float [I, K];
    empty slots have score ``-inf``)."""
    scores = fin_score[image, :n_best].tolist()  # Python numbers once, not numpy scalars per field
    hyps: list[Hypothesis] = []
    for j, score in enumerate(scores):
        if not np.isfinite(score):
            break
        length = int(fin_len[image, j])
        hyps.append(
            Hypothesis(
                tokens=fin_tokens[image, j, :length].tolist(),
                logprob=float(fin_cum[image, j]),
                score=score,
            )
        )
    return hyps
