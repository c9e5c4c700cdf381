"""Beam-width cohorts: one ``BeamBatch`` per class of beam widths, all fed by the same step call.

A ``BeamBatch`` keeps every image at the batch's widest beam (its arrays are [I, C, ...] with C the
largest beam size present), so one beam-100 request made every beam-5 image's selection, pools and
``[I·C, V]`` score grid 20 times wider while it decoded. Here requests of beam size ≤ 8, ≤ 32 and
above (``COHORT_BOUNDS``) live in separate ``BeamBatch`` es: each is as wide as its own widest request.
``rows()`` concatenates the cohorts' live rows (image indices shifted into one ``memory``), so a wide
request still shares every step call with the narrow ones; ``advance`` hands each cohort its slice of
the step output, and keeps that output's decoder states (``state_out``), to which every cohort's beams
refer. With one cohort in use (the common case) nothing is copied: its rows and memory are passed
through. Same interface as ``BeamBatch`` (what the scheduler uses), same results token for token.
"""

from __future__ import annotations

import bisect
from collections import ChainMap
from collections.abc import Sequence

import numpy as np

from service.checks import at_least
from service.engine.beam import Hypothesis
from service.engine.beam_batch import BatchRows, BeamBatch, Joining, StepPart, SteppedBatch, read_only
from service.engine.state_rows import StateRows

COHORT_BOUNDS = (8, 32)  # beam sizes ≤ 8, ≤ 32, and the rest (up to the batch's capacity)


class CohortBatch(SteppedBatch):
    """``BeamBatch`` es by beam width behind one step call (see module docstring)."""

    def __init__(
        self,
        beam_capacity: int,
        length_capacity: int,
        bos: int,
        eos: int,
        banned_ids: Sequence[int],
        bounds: Sequence[int] = COHORT_BOUNDS,
    ) -> None:
        at_least(1, beam_capacity=beam_capacity)
        if any(b < 1 for b in bounds) or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"bounds must be increasing positive beam sizes, got {list(bounds)}")
        self.bounds = [b for b in bounds if b < beam_capacity] + [beam_capacity]
        self.cohorts = [BeamBatch(b, length_capacity, bos, eos, banned_ids) for b in self.bounds]
        self._where: dict[int, BeamBatch] = {}  # request key → its cohort
        self._memory: np.ndarray | None = None
        self._memory_valid = False
        self._pool: object | None = None  # the last step call's state_out
        self._last: tuple[BatchRows, list[StepPart]] | None = None  # the last rows(), and its parts

    # -- membership -----------------------------------------------------------------------------------

    @property
    def n_images(self) -> int:
        return sum(c.n_images for c in self.cohorts)

    @property
    def keys(self) -> list[int]:
        return list(self._where)

    @property
    def steps(self) -> ChainMap[int, int]:
        """Advance calls per request (read-only view over the cohorts)."""
        return ChainMap(*(c.steps for c in self.cohorts))

    def cohort_of(self, beam_size: int) -> int:
        """Index of the cohort that takes requests of ``beam_size``."""
        return min(bisect.bisect_left(self.bounds, beam_size), len(self.bounds) - 1)

    def add_many(self, joining: Sequence[Joining]) -> None:
        if not joining:
            return
        if len({r.key for r in joining}) != len(joining):
            raise ValueError("keys must be unique")
        if clash := [r.key for r in joining if r.key in self._where]:
            raise ValueError(f"key {clash[0]} is already in the batch")
        groups: dict[int, list[Joining]] = {}
        for r in joining:
            groups.setdefault(self.cohort_of(r.params.beam_size), []).append(r)
        for index, members in groups.items():  # each cohort checks its own (all or nothing per cohort)
            self.cohorts[index].add_many(members)
            self._where.update({r.key: self.cohorts[index] for r in members})
        self._memory_valid = False

    def discard(self, *keys: int) -> None:
        present = [k for k in keys if k in self._where]
        for cohort in {id(self._where[k]): self._where[k] for k in present}.values():
            cohort.discard(*(k for k in present if self._where[k] is cohort))
        for k in present:
            del self._where[k]
        if present:
            self._memory_valid = False
        if not self._where:
            self._pool = None

    def results(self, key: int, n_best: int) -> list[list[Hypothesis]]:
        if key not in self._where:
            raise KeyError(key)
        return self._where[key].results(key, n_best)

    @property
    def memory(self) -> np.ndarray | None:
        """[I, M, Dm] of every image, cohort after cohort (rebuilt only when membership changes)."""
        if not self._memory_valid:
            parts = [c.memory for c in self.cohorts if c.memory is not None]
            self._memory = (
                parts[0] if len(parts) == 1 else (read_only(np.concatenate(parts)) if parts else None)
            )
            self._memory_valid = True
        return self._memory

    @property
    def reads_whole_rows(self) -> bool:
        """Some request reads whole log-prob rows (``BeamBatch.reads_whole_rows``)."""
        return any(c.reads_whole_rows for c in self.cohorts if c.n_images)

    @property
    def sparse_budget(self) -> int:
        """The most candidates a request's processors may remove from a row (``BeamBatch``'s)."""
        return max((c.sparse_budget for c in self.cohorts if c.n_images), default=0)

    @property
    def capacity(self) -> int:
        """The widest cohort's beam capacity (the ``k`` a ``RowTopK`` must cover)."""
        return max((c.capacity for c in self.cohorts if c.n_images), default=1)

    # -- one step -------------------------------------------------------------------------------------

    def rows(self) -> BatchRows:
        """Every cohort's live rows, cohort after cohort; image indices point into ``memory``, grid rows
        are made unique by an offset per cohort."""
        parts: list[tuple[BeamBatch, BatchRows, int, int]] = []
        pool, new, offsets = self._states()
        images = grid = 0
        for cohort, offset in zip(self.cohorts, offsets, strict=True):
            if not cohort.n_images:
                continue
            sub = cohort.rows_from(pool, new, offset)
            if sub.rows.size:
                parts.append((cohort, sub, images, grid))
            images += cohort.n_images
            grid += cohort.n_images * cohort.capacity
        if len(parts) == 1 and parts[0][2] == 0:
            joined = parts[0][1]
        elif not parts:
            joined = self.cohorts[0].rows()
        else:
            width = max(sub.tokens.shape[1] for _, sub, _, _ in parts)
            joined = BatchRows(
                rows=np.concatenate([sub.rows + g for _, sub, _, g in parts]),
                image_index=np.concatenate([sub.image_index + i for _, sub, i, _ in parts]),
                tokens=np.concatenate(
                    [np.pad(sub.tokens, ((0, 0), (0, width - sub.tokens.shape[1]))) for _, sub, _, _ in parts]
                ),
                lengths=np.concatenate([sub.lengths for _, sub, _, _ in parts]),
                state=StateRows(pool, new, np.concatenate([sub.state.index for _, sub, _, _ in parts])),
            )
        spans: list[StepPart] = []
        at = 0
        for cohort, sub, _, _ in parts:
            spans.append((cohort, sub, slice(at, at + int(sub.rows.size))))
            at += int(sub.rows.size)
        self._last = (joined, spans)
        return joined

    def _parts(self, step: BatchRows) -> list[StepPart]:
        """Each cohort with rows in ``step`` (the last ``rows()``): its rows, and where they are in it."""
        if self._last is None or self._last[0] is not step:
            raise ValueError("step must be the BatchRows the last rows() call returned")
        return self._last[1]

    def _keep(self, state_out: object) -> None:
        """Every cohort's beams refer to ``state_out``'s rows: kept here as it is (an array, or a
        backend's ``DeviceArray`` on the model's device)."""
        self._pool = state_out
        self._last = None

    def row_owners(self, step: BatchRows) -> tuple[np.ndarray, np.ndarray]:
        """(request key [N], image within that request [N]) of each row of ``step`` (the last
        ``rows()``), as ``BeamBatch.row_owners``."""
        parts = [cohort.row_owners(sub) for cohort, sub, _ in self._parts(step)]
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate([k for k, _ in parts]), np.concatenate([i for _, i in parts])

    def _states(self) -> tuple[object, np.ndarray, list[int]]:
        """(the last step call's state_out, every cohort's new initial states, each cohort's first row
        in them)."""
        width = max(c.state_width for c in self.cohorts)
        pool = self._pool if self._pool is not None else np.zeros((0, width), dtype=np.float32)
        news, offsets, at = [], [], 0
        for cohort in self.cohorts:
            offsets.append(at)
            if cohort.n_images and cohort.new_states.shape[0]:
                news.append(cohort.new_states)
                at += int(cohort.new_states.shape[0])
        new = (
            news[0] if len(news) == 1 else np.concatenate(news) if news else np.zeros((0, width), np.float32)
        )
        return pool, new, offsets


__all__ = ["COHORT_BOUNDS", "CohortBatch"]
