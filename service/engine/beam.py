"""Vectorised beam search over all beams of all images of a request.

Layout: a request with ``I`` images and beam size ``K`` owns a fixed grid of ``I * K`` rows; row
``r`` is beam ``r % K`` of image ``r // K``. Dead rows (the duplicate beams of the first step,
exhausted beams, rows of finished images) carry a cumulative log-prob of ``-inf`` and are not sent
to the model: each step asks the step function for the live rows only, with ``image_index`` telling
it which image's per-image tensors (memory) each row reads — those are kept once per image.

Scores: ``score = sum log-prob / length ** length_penalty`` where ``length`` counts words (EOS is
not counted; at least 1). Every live beam's EOS extension is offered to the image's pool of
finished hypotheses, which keeps the ``K`` best by score. An image is done when its pool is full and
no live beam can still beat the pool's worst entry (exact bound: a live beam's score can at best
reach ``sum / max_length ** length_penalty``), or when no live beam is left. At ``max_length`` words
only EOS is allowed, so every hypothesis ends with EOS.

Decoding hooks: ``logits_hook(tokens, logprobs) -> logprobs`` (the HF ``LogitsProcessor`` shape; see
``service.engine.hooks``) is applied in ``advance()`` to this search's live rows only — ``tokens`` is
``step.tokens`` (BOS w1..wt, no padding: every live row has ``t`` words), ``logprobs`` the model's
``[N, V]`` output for those rows. The search's hard constraints (``banned_ids``, no EOS before
``min_length`` words, only EOS after ``max_length`` words) are applied before the hook, so that a hook
sees only what the search could pick (``synonym_substitution`` takes the argmax of that), and again
after it, so that no hook can undo them. A hook must return a new ``[N, V]`` array (not modify its
inputs). A scheduler that puts the rows of many searches in one model call hands each search its own
slice, so a hook never sees or changes another search's rows.

Diverse beam search (Vijayakumar et al. 2018, Hamming diversity): with ``groups`` G > 1 the K beams
of an image are G groups of K/G consecutive grid columns. Each step, group g picks its top K/G
continuations from its own beams by ``cum + log p(w) - diversity_penalty * c_g(w)``, where ``c_g(w)``
counts how often word ``w`` was picked by groups 0..g-1 of the same image at this step; the stored
cumulative log-prob (and so every score) stays the unpenalised model log-prob. On the first step each
group starts from its own live beam (G rows per image: the same prefix, so group 0 gets the plain top
K/G and later groups are pushed away from its words). The finished pool stays one pool of K per image,
shared by the groups, each caption in it once. ``groups=1`` is plain beam search, bit for bit.

No Python object per hypothesis: all state is in numpy arrays. ``BeamSearch`` exposes
``rows()`` / ``advance()`` so a scheduler can batch the rows of many searches into one model call;
``beam_search`` and ``beam_search_async`` are simple drivers for a single search.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NEG_INF = -np.inf

# step_fn(tokens int64 [N,T], lengths int64 [N], state float32 [N,S], image_index int64 [N])
#   -> (logprobs float32 [N,V], state_out float32 [N,S])
StepResult = tuple[np.ndarray, np.ndarray]
SyncStepFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], StepResult]
AsyncStepFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Awaitable[StepResult]]
# logits_hook(tokens int64 [N, t+1], logprobs float [N, V]) -> logprobs float [N, V]
LogitsHookFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Hypothesis:
    """One finished caption: word ids (no BOS/EOS), summed log-prob (EOS included), score."""

    tokens: list[int]
    logprob: float
    score: float


@dataclass(frozen=True)
class StepRows:
    """The live rows to evaluate in one step. ``rows`` are grid indices (``image * K + beam``)."""

    rows: np.ndarray  # int64 [N]
    image_index: np.ndarray  # int64 [N], in [0, I)
    tokens: np.ndarray  # int64 [N, t+1]: BOS w1..wt
    lengths: np.ndarray  # int64 [N] = t + 1
    state: np.ndarray  # float32 [N, S]


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
    total = cum[:, :, None] + logprobs.astype(np.float64)  # [I, K, V]
    total[~np.isfinite(cum)] = NEG_INF
    eos_cum = total[:, :, eos].copy()
    total[:, :, eos] = NEG_INF
    flat = total.reshape(n_images, k * v)
    top = (
        np.argpartition(-flat, k - 1, axis=1)[:, :k]
        if k < k * v
        else np.arange(k * v)[None].repeat(n_images, 0)
    )
    top_cum = np.take_along_axis(flat, top, axis=1)
    order = np.argsort(-top_cum, axis=1, kind="stable")
    top = np.take_along_axis(top, order, axis=1)
    top_cum = np.take_along_axis(top_cum, order, axis=1)
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
    hyps: list[Hypothesis] = []
    for j in range(n_best):
        if not np.isfinite(fin_score[image, j]):
            break
        length = int(fin_len[image, j])
        hyps.append(
            Hypothesis(
                tokens=[int(x) for x in fin_tokens[image, j, :length]],
                logprob=float(fin_cum[image, j]),
                score=float(fin_score[image, j]),
            )
        )
    return hyps


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
