"""The engine's one beam search: every image of every live request in one set of numpy arrays.

Image ``i`` (of request ``key[i]``) owns grid rows ``i * C .. i * C + C - 1`` where ``C`` is the batch's
beam capacity; its own beam size ``K_i <= C`` leaves columns ``K_i..C-1`` dead (``-inf``). Requests
join (``add_many``) and leave (``discard``) between steps, at different step indices, each with its own
``SearchParams`` (beam size, length limits, length penalty, beam groups, processors). One ``advance``
updates all of them with a fixed number of numpy calls, whatever the number of requests; the
requests' processors and observers run on their own rows only (a Python loop over just the requests
that have them). Per-image tensors (``memory``) are kept once per image, never per beam, and no beam
holds its decoder state: it holds a reference (``state_src``) to the row of the last step call's
``state_out`` it continues from, or to its image's initial state, and each step call gets its rows'
states as such references (``service.engine.state_rows``), so the state can stay on the model's device.

Scores, stopping and diverse (grouped) selection are ``service.engine.beam``'s. Each image's pool of
finished hypotheses keeps its ``K_i`` best; an image is done when its pool is full and no live beam can
still beat the pool's worst entry (a live beam's score can at best reach ``sum / max_length **
length_penalty``), or when no live beam is left. At ``max_length`` words only EOS is allowed. With
``groups`` G > 1 the image starts from G live rows (one per group, the same prefix), and the pool keeps
each caption once. The per-request reference, ``tests/beam_oracle.py``, computes the same thing for one
request alone; the tests check them token for token.

An image whose request decodes with transformers' search (``SearchParams.search``: an imported
captioner) follows ``generate()`` instead, in the same arrays and calls: of the 2K best continuations
(end token included) only those ranked in the first K finish — an end token there, or, at the step
that writes the ``max_length``-th token, any token; a finished caption scores ``sum / (tokens + 1) **
length_penalty`` (the end token counted, or the last token at ``max_length``); the image is done when
its pool is full (``early_stopping``) or when the best live beam divided by its current length to the
power of the penalty can no longer beat the pool's worst (transformers' heuristic), or after its
``max_length``-th token; it may end a caption at its first token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from service.checks import at_least, at_most
from service.engine.beam import (
    NEG_INF,
    Hypothesis,
    beam_step,
    grouped_beam_step,
    pool_hypotheses,
    transformers_done,
    transformers_finishing,
)
from service.engine.observer import StepEvent, StepObserver
from service.engine.params import SearchParams
from service.engine.processors import LogitsProcessor
from service.engine.sparse import RowTopK, compact
from service.engine.state_rows import StateRows

_PER_IMAGE = (
    "key", "beam", "groups", "diversity", "max_length", "min_length", "length_penalty", "t", "done",
    "hf", "early",
)  # fmt: skip
_PER_BEAM = ("tokens", "cum", "state_src", "fin_tokens", "fin_len", "fin_cum", "fin_score")

Spans = dict[int, tuple[int, int]]  # request key → its rows ``a .. b - 1`` of a step


def request_spans(row_key: np.ndarray) -> Spans:
    """Each request's rows of a step, from the rows' keys (``row_key`` [N]). A request's images are
    consecutive in the batch (``add_many`` appends them together, ``discard`` keeps the order) and
    ``rows()`` lists grid rows in order, so its rows are one run: found with one comparison of
    neighbours for all requests, not one scan of every row per request."""
    if not row_key.size:
        return {}
    starts = np.flatnonzero(row_key[1:] != row_key[:-1]) + 1
    bounds = np.concatenate([[0], starts, [row_key.size]]).tolist()
    keys = row_key[bounds[:-1]].tolist()
    spans = dict(zip(keys, pairwise(bounds), strict=True))
    if len(spans) != len(keys):
        raise RuntimeError("a request's rows are not consecutive")
    return spans


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, marked read-only: the batch never writes into its ``memory`` (it makes a new array when
    images join or leave), and a backend may keep a read-only input on its device while it is passed
    again (``service.backends.onnxruntime.backend.ResidentInputs``: one upload per change of the batch's
    images, not one per step)."""
    array.flags.writeable = False
    return array


def check_state_out(state_out: object, step: BatchRows) -> None:
    """``ValueError`` unless ``state_out`` (an array or a backend's ``DeviceArray``) is [N, S] for
    ``step``."""
    shape = tuple(getattr(state_out, "shape", ()))
    want = (int(step.rows.shape[0]), step.state.width)
    if shape != want:
        raise ValueError(f"state_out must have shape {list(want)}, got {list(shape)}")


@dataclass(frozen=True)
class Joining:
    """A request joining the batch: its encoded images and its search."""

    key: int
    memory: np.ndarray  # float32 [I, M, Dm]
    initial_state: np.ndarray  # float32 [I, S]
    params: SearchParams
    observer: StepObserver | None = None


@dataclass(frozen=True)
class BatchRows:
    """The live rows of one step: grid rows, the image (batch index) each reads, and its prefix."""

    rows: np.ndarray  # int64 [N]
    image_index: np.ndarray  # int64 [N], index into ``BeamBatch.memory``
    tokens: np.ndarray  # int64 [N, T]: BOS w1..wt PAD..., T = 1 + the longest prefix
    lengths: np.ndarray  # int64 [N] = t + 1
    state: StateRows  # each row's decoder state, by reference


@dataclass
class StepUpdate:
    """What one ``advance`` did to the requests: those now finished, and those whose processor or
    observer raised (their rows went on without processors this step; the caller fails and discards
    them)."""

    finished: list[int] = field(default_factory=list)
    failed: dict[int, Exception] = field(default_factory=dict)


StepPart = tuple["BeamBatch", BatchRows, slice]  # a batch's rows of a step call, at its rows ``slice``


class SteppedBatch(ABC):
    """What the scheduler steps: ``rows()`` for a step call, ``advance`` with that call's output. A
    ``BeamBatch``, or ``service.engine.cohorts.CohortBatch``, several fed by one step call."""

    @abstractmethod
    def rows(self) -> BatchRows:
        """The live rows of the next step call."""

    @abstractmethod
    def _parts(self, step: BatchRows) -> Sequence[StepPart]:
        """The ``BeamBatch`` es with rows in ``step``, each with its own rows and where they are in it."""

    @abstractmethod
    def _keep(self, state_out: object) -> None:
        """Keep a step call's ``state_out``, to which the beams now refer; the call's rows are spent."""

    def advance(
        self,
        step: BatchRows,
        logprobs: np.ndarray | RowTopK,
        state_out: object,
        attention: np.ndarray | None = None,
    ) -> StepUpdate:
        """Consume the step output for ``step`` (what ``rows()`` returned): ``logprobs`` [N, V] (or each
        row's best words, ``RowTopK``, while no request ``reads_whole_rows``), ``state_out`` [N, S] (an
        array, or as the backend kept it on its device: never read here, only referred to and kept as it
        is), and the step model's ``attention`` [N, M] for observers. Each ``BeamBatch`` consumes its
        own rows (``BeamBatch.advance_rows``)."""
        parts = self._parts(step)
        n = step.rows.shape[0]
        if logprobs.ndim != 2 or logprobs.shape[0] != n:
            raise ValueError(f"logprobs must have shape [{n}, V], got {logprobs.shape}")
        check_state_out(state_out, step)
        self._keep(state_out)
        update = StepUpdate()
        for batch, rows, span in parts:
            part = batch.advance_rows(rows, span, logprobs, attention)
            update.finished.extend(part.finished)
            update.failed.update(part.failed)
        return update


class BeamBatch(SteppedBatch):
    """The beam-search state of many requests (see module docstring)."""

    def __init__(
        self, beam_capacity: int, length_capacity: int, bos: int, eos: int, banned_ids: Sequence[int]
    ) -> None:
        at_least(1, beam_capacity=beam_capacity, length_capacity=length_capacity)
        if eos in banned_ids:
            raise ValueError("banned_ids must not contain eos")
        self.max_capacity, self.length_capacity = beam_capacity, length_capacity
        self.capacity = 1  # current width: the largest beam size in the batch
        self.bos, self.eos = bos, eos
        self.banned_ids = np.asarray(sorted(set(banned_ids)), dtype=np.int64)
        self.key = np.zeros(0, dtype=np.int64)  # per image: the owning request
        self.beam = np.zeros(0, dtype=np.int64)
        self.groups = np.zeros(0, dtype=np.int64)
        self.diversity = np.zeros(0, dtype=np.float64)
        self.max_length = np.zeros(0, dtype=np.int64)
        self.min_length = np.zeros(0, dtype=np.int64)
        self.length_penalty = np.zeros(0, dtype=np.float64)
        self.hf = np.zeros(0, dtype=bool)  # the image decodes with transformers' search
        self._any_hf = False  # some image does (the CompCap-only batch skips its branches)
        self.early = np.zeros(0, dtype=bool)  # transformers' early_stopping
        self.t = np.zeros(0, dtype=np.int64)  # words in every live beam of the image
        self.done = np.zeros(0, dtype=bool)
        self._grouped = np.zeros(0, dtype=np.int64)  # images of diverse requests (kept with membership)
        c, lc = self.capacity, length_capacity
        self.tokens = np.zeros((0, c, lc + 1), dtype=np.int64)
        self.cum = np.zeros((0, c))
        # per beam, where its decoder state is: >= 0 a row of the last step call's state_out (``pool``),
        # -(1 + j) row j of ``new_states``, the initial states of images that joined since
        self.state_src = np.zeros((0, c), dtype=np.int64)
        self.state_width = 0
        self.pool: object = np.zeros((0, 0), dtype=np.float32)
        self.new_states = np.zeros((0, 0), dtype=np.float32)
        self.memory: np.ndarray | None = None  # [I, M, Dm], per image, never per beam
        self.fin_tokens = np.zeros((0, c, lc), dtype=np.int64)
        self.fin_len = np.zeros((0, c), dtype=np.int64)
        self.fin_cum = np.zeros((0, c))
        self.fin_score = np.zeros((0, c))
        self.processors: dict[int, tuple[LogitsProcessor, ...]] = {}
        self.observers: dict[int, StepObserver] = {}
        self.steps: dict[int, int] = {}  # advance calls per request

    # -- membership -----------------------------------------------------------------------------------

    @property
    def n_images(self) -> int:
        return int(self.key.shape[0])

    @property
    def keys(self) -> list[int]:
        return list(self.steps)

    def add_many(self, joining: Sequence[Joining]) -> None:
        """Add requests with one concatenation per array."""
        if not joining:
            return
        for r in joining:
            self._check(r)
        if len({r.key for r in joining}) != len(joining):
            raise ValueError("keys must be unique")
        widest = max(r.params.beam_size for r in joining)
        if widest > self.capacity:
            self._resize(widest)
        c, lc = self.capacity, self.length_capacity
        sizes = [r.memory.shape[0] for r in joining]
        n = sum(sizes)
        starts = np.zeros((n, c), dtype=bool)  # the first beam of each group is live on the first step
        at = 0
        for r, size in zip(joining, sizes, strict=True):
            starts[at : at + size, : r.params.beam_size : r.params.beam_size // r.params.groups] = True
            at += size
        state0 = np.concatenate([np.asarray(r.initial_state, dtype=np.float32) for r in joining])
        tokens = np.zeros((n, c, lc + 1), dtype=np.int64)
        tokens[:, :, 0] = self.bos
        if not self.state_width:
            self.state_width = int(state0.shape[1])
            self.pool = np.zeros((0, self.state_width), dtype=np.float32)
            self.new_states = np.zeros((0, self.state_width), dtype=np.float32)
        state_src = np.zeros((n, c), dtype=np.int64)
        first_new = self.new_states.shape[0]
        state_src[starts] = np.repeat(-(1 + first_new + np.arange(n)), starts.sum(axis=1))
        self.new_states = np.concatenate([self.new_states, state0])
        p = [r.params for r in joining]
        new: dict[str, np.ndarray] = {
            "key": np.asarray([r.key for r in joining], dtype=np.int64),
            "beam": np.asarray([x.beam_size for x in p], dtype=np.int64),
            "groups": np.asarray([x.groups for x in p], dtype=np.int64),
            "diversity": np.asarray([x.diversity_penalty for x in p], dtype=np.float64),
            "max_length": np.asarray([x.max_length for x in p], dtype=np.int64),
            "min_length": np.asarray([x.min_length for x in p], dtype=np.int64),
            "length_penalty": np.asarray([x.length_penalty for x in p], dtype=np.float64),
            "hf": np.asarray([x.search == "transformers" for x in p], dtype=bool),
            "early": np.asarray([x.early_stopping for x in p], dtype=bool),
        }
        fresh = self.n_images == 0
        for name, values in new.items():
            setattr(self, name, np.concatenate([getattr(self, name), np.repeat(values, sizes)]))
        self.t = np.concatenate([self.t, np.zeros(n, dtype=np.int64)])
        self.done = np.concatenate([self.done, np.zeros(n, dtype=bool)])
        self.tokens = np.concatenate([self.tokens, tokens])
        self.cum = np.concatenate([self.cum, np.where(starts, 0.0, NEG_INF)])
        self.state_src = np.concatenate([self.state_src, state_src])
        memory = np.concatenate([np.asarray(r.memory, dtype=np.float32) for r in joining])
        self.memory = read_only(
            memory if fresh or self.memory is None else np.concatenate([self.memory, memory])
        )
        self.fin_tokens = np.concatenate([self.fin_tokens, np.zeros((n, c, lc), dtype=np.int64)])
        self.fin_len = np.concatenate([self.fin_len, np.zeros((n, c), dtype=np.int64)])
        self.fin_cum = np.concatenate([self.fin_cum, np.full((n, c), NEG_INF)])
        self.fin_score = np.concatenate([self.fin_score, np.full((n, c), NEG_INF)])
        for r in joining:
            if r.params.processors:
                self.processors[r.key] = r.params.processors
            if r.observer is not None:
                self.observers[r.key] = r.observer
            self.steps[r.key] = 0
        self._grouped = np.flatnonzero(self.groups > 1)
        self._any_hf = bool(self.hf.any())

    def _check(self, r: Joining) -> None:
        if r.key in self.steps:
            raise ValueError(f"key {r.key} is already in the batch")
        n = r.memory.shape[0]
        if n < 1 or r.initial_state.shape[0] != n:
            raise ValueError(
                f"memory and initial_state must have the same I >= 1, got {n}, {r.initial_state.shape}"
            )
        at_most(self.max_capacity, beam_size=r.params.beam_size)
        at_most(self.length_capacity, max_length=r.params.max_length)
        if self.state_width and self.state_width != r.initial_state.shape[1]:
            raise ValueError(
                f"state width {r.initial_state.shape[1]} differs from the batch's {self.state_width}"
            )

    def results(self, key: int, n_best: int) -> list[list[Hypothesis]]:
        """Per image of request ``key``, up to ``n_best`` finished hypotheses, best first."""
        mine = np.flatnonzero(self.key == key)
        if not mine.size:
            raise KeyError(key)
        pool = (self.fin_tokens, self.fin_len, self.fin_cum, self.fin_score)
        return [pool_hypotheses(*pool, int(img), min(n_best, int(self.beam[img]))) for img in mine]

    def row_owners(self, step: BatchRows) -> tuple[np.ndarray, np.ndarray]:
        """(request key int64 [N], image within that request int64 [N]) of each row of ``step`` (a
        request's images are consecutive in the batch)."""
        image = step.image_index
        if not self.n_images or not image.size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts = np.flatnonzero(np.concatenate([[True], self.key[1:] != self.key[:-1]]))
        first = starts[np.searchsorted(starts, np.arange(self.n_images), side="right") - 1]
        return self.key[image], image - first[image]

    def discard(self, *keys: int) -> None:
        """Remove requests ``keys`` (those present) without results, with one compaction."""
        keys = tuple(k for k in keys if k in self.steps)
        if not keys:
            return
        keep = ~np.isin(self.key, keys, kind="table")  # integer keys: a lookup table, no sort
        for name in (*_PER_IMAGE, *_PER_BEAM):
            setattr(self, name, getattr(self, name)[keep])
        if self.memory is not None:
            self.memory = read_only(self.memory[keep]) if keep.any() else None
        for key in keys:
            self.processors.pop(key, None)
            self.observers.pop(key, None)
            del self.steps[key]
        if not self.n_images:  # nothing refers to the pooled states any more
            self.pool = np.zeros((0, self.state_width), dtype=np.float32)
            self.new_states = np.zeros((0, self.state_width), dtype=np.float32)
        self._grouped = np.flatnonzero(self.groups > 1)
        self._any_hf = bool(self.hf.any())
        widest = int(self.beam.max()) if self.beam.size else 1
        if widest < self.capacity:
            self._resize(widest)

    def _resize(self, capacity: int) -> None:
        """Change the beam width of every array. Columns past an image's beam size are always dead
        (``-inf``), so narrowing drops only dead columns and widening adds dead ones."""
        c = self.capacity
        if capacity < c:
            for name in _PER_BEAM:
                setattr(self, name, np.ascontiguousarray(getattr(self, name)[:, :capacity]))
        elif capacity > c:
            for name in _PER_BEAM:
                a, fill = getattr(self, name), NEG_INF if name in ("cum", "fin_cum", "fin_score") else 0
                pad = np.full((a.shape[0], capacity - c, *a.shape[2:]), fill, dtype=a.dtype)
                setattr(self, name, np.concatenate([a, pad], axis=1))
            self.tokens[:, c:, 0] = self.bos
        self.capacity = capacity

    # -- one step -------------------------------------------------------------------------------------

    def rows(self) -> BatchRows:
        """The live rows of every image that is not done."""
        return self.rows_from(self.pool, self.new_states, 0)

    def rows_from(self, pool: object, new: np.ndarray, new_offset: int) -> BatchRows:
        """``rows()`` with the states of a step call made of more than this batch's rows
        (``service.engine.cohorts``): ``pool`` the last call's state_out, ``new`` every batch's new
        initial states, this batch's from row ``new_offset``."""
        c = self.capacity
        live = np.isfinite(self.cum) & ~self.done[:, None]
        rows = np.flatnonzero(live).astype(np.int64)
        image = rows // c
        t_row = self.t[image]
        width = int(t_row.max()) + 1 if rows.size else 1
        src = self.state_src.reshape(-1)[rows]
        pooled = pool.shape[0]  # type: ignore[attr-defined]
        index = np.where(src >= 0, src, pooled + new_offset - 1 - src)
        return BatchRows(
            rows=rows,
            image_index=image,
            tokens=self.tokens.reshape(-1, self.length_capacity + 1)[rows, :width],
            lengths=t_row + 1,
            state=StateRows(pool, new if new.shape[1] else new.reshape(0, self.state_width), index),
        )

    def _constrain(
        self,
        logprobs: np.ndarray,
        t_row: np.ndarray,
        image: np.ndarray,
        eos: int | None = None,
        banned: np.ndarray | None = None,
    ) -> np.ndarray:
        """Hard constraints on rows (in place): banned words; no EOS before min_length words; only
        EOS at max_length words. ``eos`` and ``banned``: their columns (of a compact ``RowTopK``'s
        words), else the token ids."""
        eos = self.eos if eos is None else eos
        banned = self.banned_ids if banned is None else banned
        if banned.size:
            logprobs[:, banned] = NEG_INF
        early = t_row < self.min_length[image]
        if early.any():
            logprobs[early, eos] = NEG_INF
        at_max = t_row >= self.max_length[image]
        if self._any_hf:
            at_max &= ~self.hf[image]  # transformers' search ends otherwise
        if at_max.any():
            eos_col = logprobs[at_max, eos].copy()
            logprobs[at_max] = NEG_INF
            logprobs[at_max, eos] = eos_col
        return logprobs

    def _processed_rows(
        self, step: BatchRows, spans: Spans
    ) -> Iterator[tuple[int, tuple[LogitsProcessor, ...], tuple[int, int], np.ndarray]]:
        """Each request with processors and rows in ``step``: its key, its processors, its rows
        ``(a, b)`` and their tokens so far."""
        t_row = step.lengths - 1
        for key, processors in self.processors.items():
            mine = spans.get(key)
            if mine is not None:
                a, b = mine
                yield key, processors, mine, step.tokens[a:b, : int(t_row[a]) + 1]

    def _process(self, step: BatchRows, live: np.ndarray, spans: Spans, update: StepUpdate) -> None:
        """Each request's processors on its own rows (in place on ``live``), constrained again after
        (one ``_constrain`` for the rows of every request processed: constraints act row by row)."""
        t_row, v = step.lengths - 1, live.shape[1]
        done: list[np.ndarray] = []
        for key, processors, (a, b), tokens in self._processed_rows(step, spans):
            out = live[a:b].astype(np.float32)
            try:
                for proc in processors:
                    out = np.asarray(proc(tokens, out))
                    if out.shape != (b - a, v):
                        raise ValueError(f"a processor must return shape {(b - a, v)}, got {out.shape}")
            except Exception as exc:
                update.failed[key] = exc
                continue
            live[a:b] = out  # float64, as the float32 values were
            done.append(np.arange(a, b))
        if done:
            rows = np.concatenate(done)
            live[rows] = self._constrain(live[rows], t_row[rows], step.image_index[rows])

    def _process_candidates(
        self, step: BatchRows, live: np.ndarray, words: np.ndarray, spans: Spans, update: StepUpdate
    ) -> None:
        """``_process`` on candidate columns (a ``RowTopK``'s: ``live`` [N, k + 1], ``words`` [N, k + 1],
        the end token's the last column): each request's processors' ``sparse`` on its own rows (on a
        copy, kept only if none raises), the end token kept in its own column, constrained again after."""
        t_row, end = step.lengths - 1, live.shape[1] - 1
        done: list[np.ndarray] = []
        for key, processors, (a, b), tokens in self._processed_rows(step, spans):
            values, own = live[a:b].copy(), words[a:b].copy()
            try:
                for proc in processors:
                    proc.sparse(tokens, values, own)  # type: ignore[attr-defined]
            except Exception as exc:
                update.failed[key] = exc
                continue
            moved = own[:, :end] == self.eos  # a processor that put the end token in a word's column
            if moved.any():
                rows = np.flatnonzero(moved.any(axis=1))
                values[rows, end] = np.maximum(
                    values[rows, end], np.where(moved, values[:, :end], NEG_INF).max(axis=1)[rows]
                )
                values[:, :end][moved] = NEG_INF
            live[a:b], words[a:b] = values, own
            done.append(np.arange(a, b))
        if done:
            rows = np.concatenate(done)
            live[rows] = self._constrain(
                live[rows], t_row[rows], step.image_index[rows], end, np.zeros(0, np.int64)
            )

    def _select(self, cum: np.ndarray, logprobs: np.ndarray, eos: int) -> tuple[np.ndarray, ...]:
        """(parent, token, cum, eos_cum), each [I, C]: plain selection for every image, then grouped
        selection for the images of diverse requests, per distinct (beam, groups, penalty)."""
        sel = beam_step(cum, logprobs, eos)
        parent, token, new_cum, eos_cum = sel.parent, sel.token, sel.cum, sel.eos_cum
        grouped = self._grouped
        if grouped.size:
            configs = np.stack([self.beam[grouped], self.groups[grouped], self.diversity[grouped]], axis=1)
            for config in np.unique(configs, axis=0):
                idx = grouped[(configs == config).all(axis=1)]
                k, g = int(config[0]), int(config[1])
                gs = grouped_beam_step(cum[idx, :k], logprobs[idx, :k], self.eos, g, float(config[2]))
                parent[idx, :k], token[idx, :k], new_cum[idx, :k] = gs.parent, gs.token, gs.cum
                eos_cum[idx, :k] = gs.eos_cum
        return parent, token, new_cum, eos_cum

    @property
    def reads_whole_rows(self) -> bool:
        """Some request reads whole log-prob rows (a decoding hook without a ``sparse`` form, an
        observer, diverse groups): a step must return them whole, not a ``RowTopK``."""
        if self.observers or self._grouped.size:
            return True
        return any(not hasattr(p, "sparse") for procs in self.processors.values() for p in procs)

    @property
    def sparse_budget(self) -> int:
        """The most candidates a request's processors may remove from one of its rows
        (``LogitsProcessor.sparse_budget``): a ``RowTopK`` must hold that many more words per row."""
        return max(
            (
                sum(p.sparse_budget(self.length_capacity) for p in procs if hasattr(p, "sparse_budget"))
                for procs in self.processors.values()
            ),
            default=0,
        )

    def _parts(self, step: BatchRows) -> list[StepPart]:
        return [(self, step, slice(0, int(step.rows.shape[0])))]

    def _keep(self, state_out: object) -> None:
        self.pool = state_out

    def advance_rows(
        self,
        step: BatchRows,
        span: slice,
        logprobs: np.ndarray | RowTopK,
        attention: np.ndarray | None,
    ) -> StepUpdate:
        """``advance`` of this batch's rows ``step``: rows ``span`` of a step call (all of it, or in
        ``service.engine.cohorts`` this batch's part) whose ``logprobs`` and ``attention`` these are;
        its state_out rows ``span`` are now those rows' states, the caller keeping that state_out."""
        logprobs = logprobs[span]
        attention = None if attention is None else attention[span]
        n = step.rows.shape[0]
        self.new_states = self.new_states[:0]  # the rows that read them now have their state_out rows
        update = StepUpdate()
        words: np.ndarray | None = None  # [N, k + 1] the word of each column of a compact RowTopK
        eos, banned = self.eos, self.banned_ids
        if isinstance(logprobs, RowTopK):
            if self.reads_whole_rows:
                raise ValueError("a request of this batch reads whole log-prob rows: a RowTopK lacks them")
            dense, words = compact(logprobs, self.eos)
            eos, banned = dense.shape[1] - 1, np.zeros(0, dtype=np.int64)  # the end token: last column
            if self.banned_ids.size:
                dense[np.isin(words, self.banned_ids)] = NEG_INF
        else:
            dense = np.array(logprobs, dtype=np.float64)
        i, c, v = self.n_images, self.capacity, dense.shape[1]
        live = self._constrain(dense, step.lengths - 1, step.image_index, eos, banned)
        row_key = self.key[step.image_index]
        spans = request_spans(row_key)
        if self.processors and words is not None:
            self._process_candidates(step, live, words, spans, update)
        elif self.processors:
            self._process(step, live, spans, update)
        if n == i * c:  # every grid row is live (rows() lists them in order): no scatter needed
            full = live
        else:
            full = np.full((i * c, v), NEG_INF)
            full[step.rows] = live
        position = np.full(i * c, -1, dtype=np.int64)  # grid row -> its row of state_out
        position[step.rows] = span.start + np.arange(n)
        cum = np.where(self.done[:, None], NEG_INF, self.cum)
        parent, column, sel_cum, eos_cum = self._select(cum, full.reshape(i, c, v), eos)
        grid = np.arange(i)[:, None]
        token = column if words is None else self._words(step, words)[grid, parent, column]
        beyond = np.arange(c)[None, :] >= self.beam[:, None]  # columns past each image's beam size
        sel_cum = np.where(beyond, NEG_INF, sel_cum)
        eos_cum = np.where(beyond, NEG_INF, eos_cum)
        t_before = self.t
        last, kth = np.zeros(i, dtype=bool), np.zeros(i)
        if self._any_hf:  # transformers' search: only the K best of the 2K continuations may finish
            eos_cum, last, kth = self._hf_candidates(sel_cum, eos_cum)
        self._add_finished(eos_cum, beyond)
        self._reorder(parent, token, sel_cum, position)
        if last.any():  # at max_length every continuation of the K best finishes, not only an end token
            self._add_live_finished(last, kth, beyond)
        self.t = self.t + 1
        for key in spans:  # the requests with rows in this step
            self.steps[key] += 1
        self._update_done()
        if self.observers:
            self._observe(
                step, spans, full, live, attention, t_before, parent, token, column, sel_cum, eos_cum, update
            )
        update.finished = self._finished(update)
        return update

    def _reorder(
        self, parent: np.ndarray, token: np.ndarray, sel_cum: np.ndarray, position: np.ndarray
    ) -> None:
        """Each new beam takes its parent's prefix (plus its word) and its parent's state reference."""
        i, c = self.n_images, self.capacity
        grid = np.arange(i)[:, None]
        self.tokens = self.tokens[grid, parent]
        writable = self.t < self.max_length
        if writable.any():
            rows_w = np.flatnonzero(writable)
            self.tokens[rows_w, :, self.t[rows_w] + 1] = np.where(
                np.isfinite(sel_cum[rows_w]), token[rows_w], 0
            )
        self.state_src = position.reshape(i, c)[grid, parent]
        self.cum = sel_cum

    def _observe(
        self,
        step: BatchRows,
        spans: Spans,
        full: np.ndarray,
        live: np.ndarray,
        attention: np.ndarray | None,
        t_before: np.ndarray,
        parent: np.ndarray,
        token: np.ndarray,
        column: np.ndarray,
        sel_cum: np.ndarray,
        eos_cum: np.ndarray,
        update: StepUpdate,
    ) -> None:
        """Each observer's ``StepEvent``: its request's rows of this step."""
        i, c, v = self.n_images, self.capacity, full.shape[1]
        lp = full.reshape(i, c, v)
        for key, observer in self.observers.items():
            span = spans.get(key)
            if span is None:
                continue
            mine = np.arange(*span)
            imgs = np.flatnonzero(self.key == key)
            k = int(self.beam[imgs[0]])
            p, w, s = parent[imgs, :k], token[imgs, :k], sel_cum[imgs, :k]
            event = StepEvent(
                t=t_before[imgs],
                image=step.image_index[mine] - imgs[0],
                beam=step.rows[mine] % c,
                logprobs=live[mine],
                attention=None if attention is None else attention[mine],
                parent=p,
                token=w,
                token_logprob=np.where(np.isfinite(s), lp[imgs[:, None], p, column[imgs, :k]], NEG_INF),
                cum=s,
                eos_cum=eos_cum[imgs, :k],
                done=self.done[imgs].copy(),
            )
            try:
                observer(event)
            except Exception as exc:
                update.failed.setdefault(key, exc)

    def _finished(self, update: StepUpdate) -> list[int]:
        """The requests (in joining order) whose every image is done, but those that failed."""
        unfinished = set(self.key[~self.done].tolist())  # keys with an image still decoding
        return [k for k in self.steps if k not in update.failed and k not in unfinished]

    def _words(self, step: BatchRows, words: np.ndarray) -> np.ndarray:
        """[I, C, k + 1]: the word of each candidate column of each grid row (0 on dead rows)."""
        grid = np.zeros((self.n_images * self.capacity, words.shape[1]), dtype=np.int64)
        grid[step.rows] = words
        return grid.reshape(self.n_images, self.capacity, -1)

    def _hf_candidates(
        self, sel_cum: np.ndarray, eos_cum: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Transformers' search on its images (``beam.transformers_finishing``): (``eos_cum`` with the end
        continuations outside the K best ``-inf``, the images at the step that writes their last token,
        each image's K-th best continuation)."""
        kept, kth = transformers_finishing(sel_cum, eos_cum, self.beam)
        last = self.hf & (self.t + 1 >= self.max_length)
        return np.where(self.hf[:, None], kept, eos_cum), last, kth

    def _add_live_finished(self, last: np.ndarray, kth: np.ndarray, beyond: np.ndarray) -> None:
        """Transformers' search at ``max_length``: the live beams among the K best continuations (their
        ``t + 1``-th token just written) join the pools of the ``last`` images, scored as an end token
        would be, and go no further."""
        cand = np.where(last[:, None] & (self.cum >= kth[:, None]), self.cum, NEG_INF)
        score = cand / self._norm(self.t)[:, None]
        self._merge(cand, score, self.tokens[:, :, 1:], self.t + 1, beyond)
        self.cum = np.where(last[:, None], NEG_INF, self.cum)

    def _add_finished(self, eos_cum: np.ndarray, beyond: np.ndarray) -> None:
        """Merge each beam's EOS continuation (``t`` words) into the pools, keeping each image's best;
        in diverse requests a caption already offered by an earlier beam this step is not offered again."""
        c = self.capacity
        new_score = eos_cum / self._norm(self.t)[:, None]
        new_tokens = self.tokens[:, :, 1:]
        grouped = self._grouped
        if grouped.size:  # words past t are 0 in every beam, so whole rows compare the t words
            g_tokens = new_tokens[grouped]
            same = (g_tokens[:, :, None, :] == g_tokens[:, None, :, :]).all(axis=3)  # [G, C, C]
            earlier = np.tril(np.ones((c, c), dtype=bool), -1)
            real = np.isfinite(new_score[grouped])[:, None, :]
            repeat = (same & earlier & real).any(axis=2)
            new_score[grouped] = np.where(repeat, NEG_INF, new_score[grouped])
        self._merge(eos_cum, new_score, new_tokens, self.t, beyond)

    def _merge(
        self, cum: np.ndarray, score: np.ndarray, tokens: np.ndarray, length: np.ndarray, beyond: np.ndarray
    ) -> None:
        """Merge candidates (``cum``/``score`` [I, C], ``tokens`` [I, C, L], ``length`` words [I]) into
        the pools, keeping each image's best."""
        c = self.capacity
        merged = np.concatenate([self.fin_score, score], axis=1)  # [I, 2C]
        order = np.argsort(-merged, axis=1, kind="stable")[:, :c]
        grid = np.arange(self.n_images)[:, None]
        self.fin_score = np.where(beyond, NEG_INF, merged[grid, order])
        self.fin_cum = np.concatenate([self.fin_cum, cum], axis=1)[grid, order]
        t_full = np.repeat(length[:, None], c, axis=1)
        self.fin_len = np.concatenate([self.fin_len, t_full], axis=1)[grid, order]
        self.fin_tokens = np.concatenate([self.fin_tokens, tokens], axis=1)[grid, order]

    def _norm(self, length: np.ndarray, hf_offset: int = 1) -> np.ndarray:
        """``max(length, 1) ** length_penalty`` per image; for transformers' search ``(length +
        hf_offset) ** length_penalty`` (a finished caption's length counts its end token)."""
        if not self._any_hf:
            return np.maximum(length, 1).astype(np.float64) ** self.length_penalty
        counted = np.where(self.hf, length + hf_offset, np.maximum(length, 1)).astype(np.float64)
        return np.maximum(counted, 1.0) ** self.length_penalty

    def _update_done(self) -> None:
        live = np.isfinite(self.cum)
        best_live = np.where(live, self.cum, NEG_INF).max(axis=1)  # cum <= 0, so the bound is:
        bound = best_live / self._norm(self.max_length)
        worst = self.fin_score[np.arange(self.n_images), self.beam - 1]
        pool_full = np.isfinite(worst)
        if self._any_hf:  # transformers' search: its early_stopping, or its heuristic on the length so far
            norm = self._norm(self.t, hf_offset=0)
            hf_done = transformers_done(pool_full, best_live / norm, worst, self.early)
            hf_done |= self.t >= self.max_length
            bound_done = pool_full & (bound <= worst)
            self.done |= ~live.any(axis=1) | np.where(self.hf, hf_done, bound_done)
            return
        self.done |= ~live.any(axis=1) | (pool_full & (bound <= worst))
