"""The reference oracle: beam search of ONE request, readable, in numpy (the pre-redesign engine's
per-request search). ``service.engine.beam_batch.BeamBatch`` — the engine's only beam search — is
checked against it token for token (``tests/unit/engine/test_beam_batch.py``), and it is checked against
exhaustive search on a toy model (``tests/unit/engine/test_beam.py``).

Layout: a request with ``I`` images and beam size ``K`` owns a fixed grid of ``I * K`` rows; row ``r``
is beam ``r % K`` of image ``r // K``. Dead rows carry a cumulative log-prob of ``-inf``. Every live
beam's EOS extension is offered to the image's pool of finished hypotheses, which keeps the ``K`` best
by score. An image is done when its pool is full and no live beam can still beat the pool's worst
entry, or when no live beam is left. At ``max_length`` words only EOS is allowed. ``logits_hook`` is
applied between two passes of the hard constraints (banned ids, min/max length). With ``groups`` > 1
each group starts from its own live beam and the pool keeps each caption once.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.engine.beam import (
    NEG_INF,
    Hypothesis,
    LogitsHookFn,
    beam_step,
    grouped_beam_step,
    length_norm,
    pool_hypotheses,
)

StepResult = tuple[np.ndarray, np.ndarray]
SyncStepFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], StepResult]
AsyncStepFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Awaitable[StepResult]]


@dataclass(frozen=True)
class StepRows:
    """The live rows to evaluate in one step. ``rows`` are grid indices (``image * K + beam``)."""

    rows: np.ndarray  # int64 [N]
    image_index: np.ndarray  # int64 [N], in [0, I)
    tokens: np.ndarray  # int64 [N, t+1]: BOS w1..wt
    lengths: np.ndarray  # int64 [N] = t + 1
    state: np.ndarray  # float32 [N, S]


class BeamSearch:
    """State of one beam search over ``n_images`` images (see module docstring)."""

    def __init__(
        self,
        n_images: int,
        beam_size: int,
        max_length: int,
        bos: int,
        eos: int,
        initial_state: np.ndarray,
        length_penalty: float = 1.0,
        banned_ids: Sequence[int] = (),
        min_length: int = 1,
        logits_hook: LogitsHookFn | None = None,
        groups: int = 1,
        diversity_penalty: float = 0.0,
    ) -> None:
        if n_images < 1:
            raise ValueError(f"n_images must be >= 1, got {n_images}")
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if not 0 <= min_length <= max_length:
            raise ValueError(f"min_length must be in [0, max_length], got {min_length}")
        if length_penalty < 0:
            raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
        if initial_state.ndim != 2 or initial_state.shape[0] != n_images:
            raise ValueError(f"initial_state must have shape [n_images, S], got {initial_state.shape}")
        if eos in banned_ids:
            raise ValueError("banned_ids must not contain eos")
        if groups < 1 or beam_size % groups:
            raise ValueError(f"groups must be >= 1 and divide beam_size={beam_size}, got {groups}")
        if not (np.isfinite(diversity_penalty) and diversity_penalty >= 0):
            raise ValueError(f"diversity_penalty must be finite and >= 0, got {diversity_penalty}")
        self.logits_hook = logits_hook
        self.groups, self.diversity_penalty = groups, float(diversity_penalty)
        self.n_images, self.beam_size, self.max_length = n_images, beam_size, max_length
        self.bos, self.eos, self.length_penalty = bos, eos, length_penalty
        self.min_length = min_length
        self.banned_ids = np.asarray(sorted(set(banned_ids)), dtype=np.int64)
        i, k = n_images, beam_size
        self.step_index = 0  # words in every live beam
        self.tokens = np.zeros((i, k, max_length + 1), dtype=np.int64)
        self.tokens[:, :, 0] = bos
        self.cum = np.full((i, k), NEG_INF)
        starts = np.arange(0, k, k // groups)  # first beam of each group
        self.cum[:, starts] = 0.0  # one live row per image (per group) on the first step
        self.state = np.zeros((i, k, initial_state.shape[1]), dtype=initial_state.dtype)
        self.state[:, starts] = initial_state[:, None]
        self.done = np.zeros(i, dtype=bool)
        # pool of finished hypotheses per image, best first
        self.fin_tokens = np.zeros((i, k, max_length), dtype=np.int64)
        self.fin_len = np.zeros((i, k), dtype=np.int64)
        self.fin_cum = np.full((i, k), NEG_INF)
        self.fin_score = np.full((i, k), NEG_INF)
        self.steps = 0  # model calls made

    @property
    def finished(self) -> bool:
        return bool(self.done.all())

    def rows(self) -> StepRows:
        """The live rows for the next step call."""
        live = np.isfinite(self.cum) & ~self.done[:, None]
        rows = np.flatnonzero(live).astype(np.int64)
        t = self.step_index
        k = self.beam_size
        return StepRows(
            rows=rows,
            image_index=rows // k,
            tokens=self.tokens.reshape(-1, self.max_length + 1)[rows, : t + 1],
            lengths=np.full(rows.shape[0], t + 1, dtype=np.int64),
            state=self.state.reshape(-1, self.state.shape[-1])[rows],
        )

    def advance(self, step: StepRows, logprobs: np.ndarray, state_out: np.ndarray) -> None:
        """Consume the step function's output for ``step`` (the value ``rows()`` returned)."""
        i, k, t = self.n_images, self.beam_size, self.step_index
        n = step.rows.shape[0]
        if logprobs.ndim != 2 or logprobs.shape[0] != n:
            raise ValueError(f"logprobs must have shape [{n}, V], got {logprobs.shape}")
        if state_out.shape != step.state.shape:
            raise ValueError(f"state_out must have shape {step.state.shape}, got {state_out.shape}")
        v = logprobs.shape[1]
        live = self._constrain(np.array(logprobs), t)
        if self.logits_hook is not None and n:
            live = np.asarray(self.logits_hook(step.tokens, live))
            if live.shape != (n, v):
                raise ValueError(f"logits_hook must return shape {(n, v)}, got {live.shape}")
            live = self._constrain(np.array(live), t)
        full = np.full((i * k, v), NEG_INF, dtype=np.float64)
        full[step.rows] = live
        state_full = self.state.reshape(i * k, -1).copy()
        state_full[step.rows] = state_out
        cum = np.where(self.done[:, None], NEG_INF, self.cum)
        if self.groups == 1:
            sel = beam_step(cum, full.reshape(i, k, v), self.eos)
        else:
            sel = grouped_beam_step(cum, full.reshape(i, k, v), self.eos, self.groups, self.diversity_penalty)

        self._add_finished(sel.eos_cum, t)
        grid = np.arange(i)[:, None]
        self.tokens = self.tokens[grid, sel.parent]
        if t < self.max_length:
            self.tokens[:, :, t + 1] = np.where(np.isfinite(sel.cum), sel.token, 0)
        self.state = state_full.reshape(i, k, -1)[grid, sel.parent]
        self.cum = sel.cum
        self.step_index = t + 1
        self.steps += 1
        self._update_done()

    def _constrain(self, logprobs: np.ndarray, t: int) -> np.ndarray:
        """Apply the hard constraints in place to the live rows' log-probs ``[N, V]`` at step ``t``."""
        if self.banned_ids.size:
            logprobs[:, self.banned_ids] = NEG_INF
        if t < self.min_length:
            logprobs[:, self.eos] = NEG_INF
        if t >= self.max_length:  # only EOS may follow max_length words
            eos_col = logprobs[:, self.eos].copy()
            logprobs[:] = NEG_INF
            logprobs[:, self.eos] = eos_col
        return logprobs

    def _add_finished(self, eos_cum: np.ndarray, t: int) -> None:
        """Merge each beam's EOS continuation (``t`` words) into the pools, keeping the best K."""
        k = self.beam_size
        new_score = eos_cum / length_norm(t, self.length_penalty)
        new_tokens = np.zeros_like(self.fin_tokens)
        new_tokens[:, :, :t] = self.tokens[:, :, 1 : t + 1]
        if self.groups > 1:  # groups may reach the same caption: keep each caption once in the pool
            new_score = np.where(self._repeats(new_tokens, new_score, t), NEG_INF, new_score)
        score = np.concatenate([self.fin_score, new_score], axis=1)  # [I, 2K]
        order = np.argsort(-score, axis=1, kind="stable")[:, :k]
        grid = np.arange(self.n_images)[:, None]
        self.fin_score = score[grid, order]
        self.fin_cum = np.concatenate([self.fin_cum, eos_cum], axis=1)[grid, order]
        self.fin_len = np.concatenate([self.fin_len, np.full_like(self.fin_len, t)], axis=1)[grid, order]
        self.fin_tokens = np.concatenate([self.fin_tokens, new_tokens], axis=1)[grid, order]

    def _repeats(self, new_tokens: np.ndarray, new_score: np.ndarray, t: int) -> np.ndarray:
        """bool [I, K]: new hypothesis ``k`` equals a live earlier new one. (The pool holds no caption
        of ``t`` words yet: a hypothesis of ``t`` words can only finish at step ``t``.)"""
        k = self.beam_size
        same = (new_tokens[:, :, None, :t] == new_tokens[:, None, :, :t]).all(axis=3)  # [I, K, K]
        earlier = np.tril(np.ones((k, k), dtype=bool), -1)  # [k, j]: j < k
        real = np.isfinite(new_score)[:, None, :]  # a dead beam hides nothing
        return (same & earlier & real).any(axis=2)

    def _update_done(self) -> None:
        live = np.isfinite(self.cum)
        best_live = np.where(live, self.cum, NEG_INF).max(axis=1)  # cum <= 0, so the bound is:
        bound = best_live / length_norm(self.max_length, self.length_penalty)
        pool_full = np.isfinite(self.fin_score).all(axis=1)
        worst = self.fin_score[:, -1]
        self.done |= ~live.any(axis=1) | (pool_full & (bound <= worst))

    def results(self, n_best: int) -> list[list[Hypothesis]]:
        """Per image, up to ``n_best`` finished hypotheses, best score first."""
        if not 1 <= n_best <= self.beam_size:
            raise ValueError(f"n_best must be in [1, beam_size], got {n_best}")
        pool = (self.fin_tokens, self.fin_len, self.fin_cum, self.fin_score)
        return [pool_hypotheses(*pool, img, n_best) for img in range(self.n_images)]


def _check_n_best(n_best: int, beam_size: int) -> None:
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be in [1, beam_size={beam_size}], got {n_best}")


def beam_search(
    step_fn: SyncStepFn,
    n_images: int,
    beam_size: int,
    max_length: int,
    bos: int,
    eos: int,
    n_best: int,
    length_penalty: float = 1.0,
    initial_state: np.ndarray | None = None,
    banned_ids: Sequence[int] = (),
    min_length: int = 1,
    *,
    logits_hook: LogitsHookFn | None = None,
    groups: int = 1,
    diversity_penalty: float = 0.0,
) -> list[list[Hypothesis]]:
    """Run a beam search with a synchronous ``step_fn`` (see ``SyncStepFn``): the same loop as
    ``beam_search_async``, driven to completion here; not for use inside a running event loop."""
    return asyncio.run(
        beam_search_async(
            step_fn,
            n_images,
            beam_size,
            max_length,
            bos,
            eos,
            n_best,
            length_penalty,
            initial_state,
            banned_ids,
            min_length,
            logits_hook=logits_hook,
            groups=groups,
            diversity_penalty=diversity_penalty,
        )
    )


async def beam_search_async(
    step_fn: AsyncStepFn | SyncStepFn,
    n_images: int,
    beam_size: int,
    max_length: int,
    bos: int,
    eos: int,
    n_best: int,
    length_penalty: float = 1.0,
    initial_state: np.ndarray | None = None,
    banned_ids: Sequence[int] = (),
    min_length: int = 1,
    on_step: Callable[[int], Any] | None = None,
    *,
    logits_hook: LogitsHookFn | None = None,
    groups: int = 1,
    diversity_penalty: float = 0.0,
) -> list[list[Hypothesis]]:
    """Run a beam search with an async (or sync) ``step_fn``; ``on_step(n_rows)`` is called per step.
    ``logits_hook``, ``groups`` and ``diversity_penalty`` as in ``BeamSearch``."""
    _check_n_best(n_best, beam_size)
    if initial_state is None:
        initial_state = np.zeros((n_images, 1), dtype=np.float32)
    search = BeamSearch(
        n_images,
        beam_size,
        max_length,
        bos,
        eos,
        initial_state,
        length_penalty,
        banned_ids,
        min_length,
        logits_hook=logits_hook,
        groups=groups,
        diversity_penalty=diversity_penalty,
    )
    while not search.finished:
        rows = search.rows()
        if on_step is not None:
            on_step(int(rows.rows.shape[0]))
        result = step_fn(rows.tokens, rows.lengths, rows.state, rows.image_index)
        if inspect.isawaitable(result):
            result = await result
        logprobs, state_out = result
        search.advance(rows, logprobs, state_out)
    return search.results(n_best)
