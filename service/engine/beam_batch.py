"""Beam search for the images of many requests at once, vectorised over all of them.

``BeamBatch`` holds the state of every image of every active request in one set of numpy arrays:
image ``i`` (of request ``key[i]``) owns grid rows ``i * C .. i * C + C - 1`` where ``C`` is the
batch's beam capacity; its own beam size ``K_i <= C`` leaves columns ``K_i..C-1`` dead (``-inf``).
Requests join (``add``) and leave (``pop``) between steps, at different step indices, with their own
beam size, length limits and length penalty; one ``advance`` updates all of them with a fixed number
of numpy calls, whatever the number of requests. Per-request decoding hooks are applied to the rows of
their request only (a Python loop over the requests that have hooks, none for the others).

It computes exactly what ``beam.BeamSearch`` computes for each request alone (same selection, same
finished pool, same stopping rule; see that module for the scoring) — the tests check this token for
token — so ``BeamSearch`` stays the readable reference and this class the fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.engine.beam import NEG_INF, Hypothesis, LogitsHookFn, beam_step, pool_hypotheses


@dataclass(frozen=True)
class NewRequest:
    """A request joining a ``BeamBatch`` (see ``BeamBatch.add``)."""

    key: int
    memory: np.ndarray  # float32 [I, M, Dm]
    initial_state: np.ndarray  # float32 [I, S]
    beam_size: int
    max_length: int
    min_length: int = 1
    length_penalty: float = 1.0
    logits_hook: LogitsHookFn | None = None


@dataclass(frozen=True)
class BatchRows:
    """The live rows of one step: grid rows, the image (batch index) each reads, and its prefix."""

    rows: np.ndarray  # int64 [N]
    image_index: np.ndarray  # int64 [N], index into ``BeamBatch.memory``
    tokens: np.ndarray  # int64 [N, T]: BOS w1..wt PAD..., T = 1 + the longest prefix
    lengths: np.ndarray  # int64 [N] = t + 1
    last_token: np.ndarray  # int64 [N]: wt (BOS at t = 0)
    state: np.ndarray  # float32 [N, S]


class BeamBatch:
    """The beam-search state of many requests (see module docstring)."""

    def __init__(
        self, beam_capacity: int, length_capacity: int, bos: int, eos: int, banned_ids: Sequence[int]
    ):
        if beam_capacity < 1:
            raise ValueError(f"beam_capacity must be >= 1, got {beam_capacity}")
        if length_capacity < 1:
            raise ValueError(f"length_capacity must be >= 1, got {length_capacity}")
        if eos in banned_ids:
            raise ValueError("banned_ids must not contain eos")
        self.max_capacity, self.length_capacity = beam_capacity, length_capacity
        self.capacity = 1  # current width: the largest beam size in the batch
        self.bos, self.eos = bos, eos
        self.banned_ids = np.asarray(sorted(set(banned_ids)), dtype=np.int64)
        c, lc = self.capacity, length_capacity
        self.key = np.zeros(0, dtype=np.int64)  # owning request per image
        self.beam = np.zeros(0, dtype=np.int64)
        self.max_length = np.zeros(0, dtype=np.int64)
        self.min_length = np.zeros(0, dtype=np.int64)
        self.length_penalty = np.zeros(0, dtype=np.float64)
        self.t = np.zeros(0, dtype=np.int64)  # words in every live beam of the image
        self.done = np.zeros(0, dtype=bool)
        self.tokens = np.zeros((0, c, lc + 1), dtype=np.int64)
        self.cum = np.zeros((0, c))
        self.state = np.zeros((0, c, 1), dtype=np.float32)
        self.memory: np.ndarray | None = None  # [I, M, Dm], per image, never per beam
        self.fin_tokens = np.zeros((0, c, lc), dtype=np.int64)
        self.fin_len = np.zeros((0, c), dtype=np.int64)
        self.fin_cum = np.zeros((0, c))
        self.fin_score = np.zeros((0, c))
        self.hooks: dict[int, LogitsHookFn] = {}
        self.steps: dict[int, int] = {}  # advance calls per request

    # -- membership -------------------------------------------------------------------------------

    @property
    def n_images(self) -> int:
        return int(self.key.shape[0])

    @property
    def keys(self) -> list[int]:
        return list(self.steps)

    def add(
        self,
        key: int,
        memory: np.ndarray,
        initial_state: np.ndarray,
        beam_size: int,
        max_length: int,
        min_length: int = 1,
        length_penalty: float = 1.0,
        logits_hook: LogitsHookFn | None = None,
    ) -> None:
        """Add request ``key``: ``memory`` [I, M, Dm] and ``initial_state`` [I, S] of its images."""
        self.add_many(
            [
                NewRequest(
                    key, memory, initial_state, beam_size, max_length, min_length, length_penalty, logits_hook
                )
            ]
        )

    def add_many(self, requests: Sequence[NewRequest]) -> None:
        """Add several requests with one concatenation per array (see ``add``)."""
        if not requests:
            return
        for r in requests:
            self._check(r)
        if len({r.key for r in requests}) != len(requests):
            raise ValueError("keys must be unique")
        widest = max(r.beam_size for r in requests)
        if widest > self.capacity:
            self._resize(widest)
        c, lc = self.capacity, self.length_capacity
        sizes = [r.memory.shape[0] for r in requests]
        n = sum(sizes)

        def per_image(values: list[float] | list[int], dtype: type) -> np.ndarray:
            return np.repeat(np.asarray(values, dtype=dtype), sizes)

        state0 = np.concatenate([np.asarray(r.initial_state, dtype=np.float32) for r in requests])
        tokens = np.zeros((n, c, lc + 1), dtype=np.int64)
        tokens[:, :, 0] = self.bos
        cum = np.full((n, c), NEG_INF)
        cum[:, 0] = 0.0  # one live row per image on the first step
        state = np.zeros((n, c, state0.shape[1]), dtype=np.float32)
        state[:, 0] = state0
        memory = np.concatenate([np.asarray(r.memory, dtype=np.float32) for r in requests])
        fresh = self.n_images == 0
        self.key = np.concatenate([self.key, per_image([r.key for r in requests], np.int64)])
        self.beam = np.concatenate([self.beam, per_image([r.beam_size for r in requests], np.int64)])
        self.max_length = np.concatenate(
            [self.max_length, per_image([r.max_length for r in requests], np.int64)]
        )
        self.min_length = np.concatenate(
            [self.min_length, per_image([r.min_length for r in requests], np.int64)]
        )
        self.length_penalty = np.concatenate(
            [self.length_penalty, per_image([r.length_penalty for r in requests], np.float64)]
        )
        self.t = np.concatenate([self.t, np.zeros(n, dtype=np.int64)])
        self.done = np.concatenate([self.done, np.zeros(n, dtype=bool)])
        self.tokens = np.concatenate([self.tokens, tokens])
        self.cum = np.concatenate([self.cum, cum])
        self.state = state if fresh else np.concatenate([self.state, state])
        self.memory = memory if fresh or self.memory is None else np.concatenate([self.memory, memory])
        self.fin_tokens = np.concatenate([self.fin_tokens, np.zeros((n, c, lc), dtype=np.int64)])
        self.fin_len = np.concatenate([self.fin_len, np.zeros((n, c), dtype=np.int64)])
        self.fin_cum = np.concatenate([self.fin_cum, np.full((n, c), NEG_INF)])
        self.fin_score = np.concatenate([self.fin_score, np.full((n, c), NEG_INF)])
        for r in requests:
            if r.logits_hook is not None:
                self.hooks[r.key] = r.logits_hook
            self.steps[r.key] = 0

    def _check(self, r: NewRequest) -> None:
        if r.key in self.steps:
            raise ValueError(f"key {r.key} is already in the batch")
        n = r.memory.shape[0]
        if n < 1 or r.initial_state.shape[0] != n:
            raise ValueError(
                f"memory and initial_state must have the same I >= 1, got {n}, {r.initial_state.shape}"
            )
        if not 1 <= r.beam_size <= self.max_capacity:
            raise ValueError(f"beam_size must be in [1, {self.max_capacity}], got {r.beam_size}")
        if not 1 <= r.max_length <= self.length_capacity:
            raise ValueError(f"max_length must be in [1, {self.length_capacity}], got {r.max_length}")
        if not 0 <= r.min_length <= r.max_length:
            raise ValueError(f"min_length must be in [0, max_length], got {r.min_length}")
        if r.length_penalty < 0:
            raise ValueError(f"length_penalty must be >= 0, got {r.length_penalty}")
        if self.n_images and self.state.shape[2] != r.initial_state.shape[1]:
            raise ValueError(
                f"state width {r.initial_state.shape[1]} differs from the batch's {self.state.shape[2]}"
            )

    def finished(self, key: int) -> bool:
        return bool(self.done[self.key == key].all())

    def pop(self, key: int, n_best: int) -> list[list[Hypothesis]]:
        """Remove request ``key`` and return its results (see ``results``)."""
        out = self.results(key, n_best)
        self.discard(key)
        return out

    def results(self, key: int, n_best: int) -> list[list[Hypothesis]]:
        """Per image of request ``key``, up to ``n_best`` finished hypotheses, best first."""
        mine = np.flatnonzero(self.key == key)
        if not mine.size:
            raise KeyError(key)
        pool = (self.fin_tokens, self.fin_len, self.fin_cum, self.fin_score)
        return [pool_hypotheses(*pool, int(img), min(n_best, int(self.beam[img]))) for img in mine]

    def discard(self, *keys: int) -> None:
        """Remove requests ``keys`` (those present) without results, with one compaction."""
        keys = tuple(k for k in keys if k in self.steps)
        if not keys:
            return
        keep = ~np.isin(self.key, keys)
        for name in (
            "key", "beam", "max_length", "min_length", "length_penalty", "t", "done", "tokens", "cum",
            "state", "fin_tokens", "fin_len", "fin_cum", "fin_score",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name)[keep])
        if self.memory is not None:
            self.memory = self.memory[keep] if keep.any() else None
        for key in keys:
            self.hooks.pop(key, None)
            del self.steps[key]
        widest = int(self.beam.max()) if self.beam.size else 1
        if widest < self.capacity:
            self._resize(widest)

    def _resize(self, capacity: int) -> None:
        """Change the beam width of every array. Columns past an image's beam size are always dead
        (``-inf``), so narrowing drops only dead columns and widening adds dead ones."""
        c = self.capacity
        if capacity < c:
            keep = slice(0, capacity)
            for name in ("tokens", "cum", "state", "fin_tokens", "fin_len", "fin_cum", "fin_score"):
                setattr(self, name, np.ascontiguousarray(getattr(self, name)[:, keep]))
        elif capacity > c:
            extra = capacity - c

            def widen(a: np.ndarray, fill: float) -> np.ndarray:
                pad = np.full((a.shape[0], extra, *a.shape[2:]), fill, dtype=a.dtype)
                return np.concatenate([a, pad], axis=1)

            self.tokens = widen(self.tokens, 0)
            self.tokens[:, c:, 0] = self.bos
            self.cum = widen(self.cum, NEG_INF)
            self.state = widen(self.state, 0.0)
            self.fin_tokens = widen(self.fin_tokens, 0)
            self.fin_len = widen(self.fin_len, 0)
            self.fin_cum = widen(self.fin_cum, NEG_INF)
            self.fin_score = widen(self.fin_score, NEG_INF)
        self.capacity = capacity

    # -- one step ---------------------------------------------------------------------------------

    def rows(self) -> BatchRows:
        """The live rows of every image that is not done."""
        c = self.capacity
        live = np.isfinite(self.cum) & ~self.done[:, None]
        rows = np.flatnonzero(live).astype(np.int64)
        image = rows // c
        t_row = self.t[image]
        width = int(t_row.max()) + 1 if rows.size else 1
        flat = self.tokens.reshape(-1, self.length_capacity + 1)
        return BatchRows(
            rows=rows,
            image_index=image,
            tokens=flat[rows, :width],
            lengths=t_row + 1,
            last_token=flat[rows, t_row],
            state=self.state.reshape(-1, self.state.shape[2])[rows],
        )

    def _constrain(self, logprobs: np.ndarray, t_row: np.ndarray, image: np.ndarray) -> np.ndarray:
        """Hard constraints on rows (in place): banned words; no EOS before min_length words; only
        EOS at max_length words."""
        if self.banned_ids.size:
            logprobs[:, self.banned_ids] = NEG_INF
        early = t_row < self.min_length[image]
        if early.any():
            logprobs[early, self.eos] = NEG_INF
        at_max = t_row >= self.max_length[image]
        if at_max.any():
            eos_col = logprobs[at_max, self.eos].copy()
            logprobs[at_max] = NEG_INF
            logprobs[at_max, self.eos] = eos_col
        return logprobs

    def advance(self, step: BatchRows, logprobs: np.ndarray, state_out: np.ndarray) -> list[int]:
        """Consume the step output for ``step`` (what ``rows()`` returned); return the keys of the
        requests that are now finished (all their images done)."""
        n = step.rows.shape[0]
        if logprobs.ndim != 2 or logprobs.shape[0] != n:
            raise ValueError(f"logprobs must have shape [{n}, V], got {logprobs.shape}")
        if state_out.shape != step.state.shape:
            raise ValueError(f"state_out must have shape {step.state.shape}, got {state_out.shape}")
        i, c, v = self.n_images, self.capacity, logprobs.shape[1]
        t_row = step.lengths - 1
        live = self._constrain(np.array(logprobs, dtype=np.float64), t_row, step.image_index)
        if self.hooks:
            row_key = self.key[step.image_index]
            for key, hook in self.hooks.items():
                mine = np.flatnonzero(row_key == key)
                if not mine.size:
                    continue
                hooked = np.asarray(
                    hook(step.tokens[mine, : int(t_row[mine[0]]) + 1], live[mine].astype(np.float32))
                )
                if hooked.shape != (mine.size, v):
                    raise ValueError(f"logits_hook must return shape {(mine.size, v)}, got {hooked.shape}")
                live[mine] = self._constrain(
                    np.array(hooked, dtype=np.float64), t_row[mine], step.image_index[mine]
                )
        full = np.full((i * c, v), NEG_INF)
        full[step.rows] = live
        state = self.state.reshape(i * c, -1)
        state[step.rows] = state_out
        cum = np.where(self.done[:, None], NEG_INF, self.cum)
        sel = beam_step(cum, full.reshape(i, c, v), self.eos)
        beyond = np.arange(c)[None, :] >= self.beam[:, None]  # columns past each image's beam size
        sel_cum = np.where(beyond, NEG_INF, sel.cum)

        self._add_finished(np.where(beyond, NEG_INF, sel.eos_cum), beyond)
        grid = np.arange(i)[:, None]
        self.tokens = self.tokens[grid, sel.parent]
        writable = self.t < self.max_length
        if writable.any():
            rows_w = np.flatnonzero(writable)
            self.tokens[rows_w, :, self.t[rows_w] + 1] = np.where(
                np.isfinite(sel_cum[rows_w]), sel.token[rows_w], 0
            )
        self.state = self.state[grid, sel.parent]
        self.cum = sel_cum
        self.t = self.t + 1
        for key in np.unique(self.key[step.image_index]).tolist():
            self.steps[key] += 1
        self._update_done()
        return [k for k in self.steps if self.done[self.key == k].all()]

    def _add_finished(self, eos_cum: np.ndarray, beyond: np.ndarray) -> None:
        """Merge each beam's EOS continuation (``t`` words) into the pools, keeping each image's best."""
        c = self.capacity
        new_score = eos_cum / self._norm(self.t)[:, None]
        new_tokens = self.tokens[:, :, 1:]
        score = np.concatenate([self.fin_score, new_score], axis=1)  # [I, 2C]
        order = np.argsort(-score, axis=1, kind="stable")[:, :c]
        grid = np.arange(self.n_images)[:, None]
        self.fin_score = np.where(beyond, NEG_INF, score[grid, order])
        self.fin_cum = np.concatenate([self.fin_cum, eos_cum], axis=1)[grid, order]
        t_full = np.broadcast_to(self.t[:, None], self.fin_len.shape)
        self.fin_len = np.concatenate([self.fin_len, t_full], axis=1)[grid, order]
        self.fin_tokens = np.concatenate([self.fin_tokens, new_tokens], axis=1)[grid, order]

    def _norm(self, length: np.ndarray) -> np.ndarray:
        """``max(length, 1) ** length_penalty`` per image (``beam.length_norm`` with per-image penalties)."""
        return np.maximum(length, 1).astype(np.float64) ** self.length_penalty

    def _update_done(self) -> None:
        live = np.isfinite(self.cum)
        best_live = np.where(live, self.cum, NEG_INF).max(axis=1)  # cum <= 0, so the bound is:
        bound = best_live / self._norm(self.max_length)
        worst = self.fin_score[np.arange(self.n_images), self.beam - 1]
        pool_full = np.isfinite(worst)
        self.done |= ~live.any(axis=1) | (pool_full & (bound <= worst))
