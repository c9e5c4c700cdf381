"""Iteration-level batching of beam search across requests (Orca / vLLM style), one loop per captioner.

Every iteration makes ONE ``<cap>_step`` call carrying every live beam row of every active request of
that captioner. Requests wait in a bounded queue; at each iteration the loop admits as many as the row
budget (``max_rows``: ``images × beam_size`` reserved per request) and ``max_active`` allow, and runs
``visual_encoder`` + ``<cap>_init`` for all of them in one batched call each, concurrently with the
step calls of the requests already decoding; they join the batch at the next iteration after their
encoding finishes. A request whose beam search is done leaves the batch at once; finished requests
are re-ranked in batched ranker calls (one ``<ranker>_image`` and one ``<ranker>_text`` call for all of
them) off the step loop. A request whose caller stopped waiting (deadline, disconnect) is dropped
before the next step call, freeing its rows.

Beam state lives in one ``BeamBatch`` (all requests' images in one set of arrays, advanced with a
fixed number of numpy calls per step); per-image tensors (``memory``) are kept there once per image
and the step call gets a row → image index. Diverse (grouped) searches select per group, so each runs
in a ``BeamSearch`` of its own whose rows ride in the same step call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from service.backends.base import Backend
from service.engine.beam import BeamSearch, Hypothesis, StepRows
from service.engine.beam_batch import BatchRows, BeamBatch, NewRequest
from service.engine.rerank import fixed_dim, ranker_scores
from service.manifest import CaptionerEntry, Manifest
from service.metrics import Metrics

log = logging.getLogger(__name__)

LogitsHook = Callable[[np.ndarray, np.ndarray], np.ndarray]


class QueueFullError(Exception):
    """The admission queue is full; the caller should retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"the decoding queue is full; retry after {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class DecodeRequest:
    """One request's decoding job: ``images`` uint8 [I, H, W, 3] and the search options."""

    images: np.ndarray
    beam_size: int
    max_length: int
    n_best: int
    length_penalty: float = 1.0
    ranker: str | None = None
    logits_hook: LogitsHook | None = None
    groups: int = 1
    diversity_penalty: float = 0.0
    min_length: int = 1

    @property
    def rows(self) -> int:
        """Rows this request may occupy in one step call."""
        return int(self.images.shape[0]) * self.beam_size


@dataclass
class DecodeResult:
    hypotheses: list[list[Hypothesis]]  # per image, best score first
    ranker_scores: list[list[float]] | None  # per image, aligned with ``hypotheses``
    iterations: int  # step calls this request took part in
    timings_ms: dict[str, float] = field(default_factory=dict)  # queue, encode, decode, rerank


@dataclass(eq=False)
class _Job:
    serial: int
    request: DecodeRequest
    future: asyncio.Future[DecodeResult]
    deadline: float  # time.monotonic()
    submitted: float = field(default_factory=time.perf_counter)
    encode_start: float = 0.0
    decode_start: float = 0.0
    decode_end: float = 0.0
    encode_ms: float = 0.0
    regions: np.ndarray | None = None
    memory: np.ndarray | None = None
    state0: np.ndarray | None = None
    search: BeamSearch | None = None  # only for diverse (grouped) searches; others live in the BeamBatch
    hypotheses: list[list[Hypothesis]] | None = None
    iterations: int = 0

    @property
    def abandoned(self) -> bool:
        return self.future.done()


class CaptionerScheduler:
    """The decoding loop of one captioner. ``submit`` is the only entry point; ``close`` stops it."""

    def __init__(
        self,
        backend: Backend,
        manifest: Manifest,
        captioner: CaptionerEntry,
        banned_ids: Sequence[int],
        max_rows: int = 512,
        max_queue: int = 256,
        max_active: int = 128,
        metrics: Metrics | None = None,
        beam_capacity: int = 10,
    ) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        if max_active < 1:
            raise ValueError(f"max_active must be >= 1, got {max_active}")
        self.backend, self.manifest, self.cap = backend, manifest, captioner
        self.banned_ids = tuple(banned_ids)
        self.max_rows, self.max_queue, self.max_active = max_rows, max_queue, max_active
        self.metrics = metrics
        vocab = manifest.vocabulary
        self.bos, self.eos, self.pad = vocab.bos_id, vocab.eos_id, vocab.pad_id
        self.last_token = captioner.reads == "last_token"
        self.fixed_t = None if self.last_token else fixed_dim(manifest, captioner.step, "tokens", 1)
        self._waiting: deque[_Job] = deque()
        self._active: list[_Job] = []
        self._joining: list[_Job] = []  # encoded, join at the next iteration
        self._reserved_rows = 0  # rows of jobs being encoded or decoding
        self._encoding: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._batch = BeamBatch(beam_capacity, captioner.max_length, self.bos, self.eos, self.banned_ids)
        self._loop_task: asyncio.Task[None] | None = None
        self._closed = False
        self.iterations = 0
        self._serial = 0

    # -- public -----------------------------------------------------------------------------------

    @property
    def queue_length(self) -> int:
        return len(self._waiting)

    @property
    def active_requests(self) -> int:
        return len(self._active) + len(self._joining)

    async def submit(self, request: DecodeRequest, timeout_s: float) -> DecodeResult:
        """Decode ``request``; raises ``QueueFullError`` at once if the queue is full and
        ``TimeoutError`` if the result is not ready within ``timeout_s``. Cancelling the caller (a
        disconnect) drops the job before the next step call."""
        if self._closed:
            raise RuntimeError("the scheduler is closed")
        if request.rows > self.max_rows:
            raise ValueError(f"images × beam_size = {request.rows} exceeds max_rows = {self.max_rows}")
        if len(self._waiting) >= self.max_queue:
            raise QueueFullError(retry_after_s=1.0)
        self._ensure_loop()
        future: asyncio.Future[DecodeResult] = asyncio.get_running_loop().create_future()
        self._serial += 1
        job = _Job(self._serial, request, future, deadline=time.monotonic() + timeout_s)
        self._waiting.append(job)
        self._gauge()
        self._wake.set()
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(future)
        finally:
            if not future.done():
                future.cancel()  # the loop drops the job (and frees its rows) before its next step
                self._wake.set()

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._loop_task, self._encoding, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for job in (*self._waiting, *self._active, *self._joining):
            if not job.future.done():
                job.future.set_exception(RuntimeError("the scheduler was closed"))

    # -- loop -------------------------------------------------------------------------------------

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(), name=f"scheduler:{self.cap.name}")

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                self._expire()
                self._join()
                self._admit()
                self._gauge()
                if self._active:
                    await self._iterate()
                    continue
            except Exception as exc:  # a bug must not leave requests hanging: fail the batch, go on
                log.exception("scheduler iteration failed")
                self._leave(list(self._active), exc)
                continue
            await self._wake.wait()

    def _join(self) -> None:
        """Move encoded jobs into the decoding batch (between step calls only)."""
        joining = [j for j in self._joining if j.search is None]
        self._batch.add_many(
            [
                NewRequest(
                    j.serial,
                    j.memory,
                    j.state0,
                    beam_size=j.request.beam_size,
                    max_length=j.request.max_length,
                    min_length=j.request.min_length,
                    length_penalty=j.request.length_penalty,
                    logits_hook=j.request.logits_hook,
                )
                for j in joining
                if j.memory is not None and j.state0 is not None
            ]
        )
        self._active.extend(self._joining)
        self._joining.clear()

    def _leave(self, jobs: Sequence[_Job], exc: BaseException | None = None) -> None:
        """Take ``jobs`` out of decoding (freeing their rows); fail them with ``exc`` if given."""
        leaving = [j for j in jobs if j in self._active]
        for job in leaving:
            self._active.remove(job)
            self._reserved_rows -= job.request.rows
        self._batch.discard(*(j.serial for j in leaving))
        if exc is not None:
            self._fail(jobs, exc)

    def _expire(self) -> None:
        """Drop abandoned or overdue jobs from every stage, freeing their rows."""
        now = time.monotonic()
        for job in (*self._waiting, *self._active, *self._joining):
            if not job.future.done() and now > job.deadline:
                job.future.set_exception(TimeoutError("deadline exceeded"))
        if any(j.abandoned for j in self._waiting):
            self._waiting = deque(j for j in self._waiting if not j.abandoned)
        self._leave([j for j in self._active if j.abandoned])
        for job in [j for j in self._joining if j.abandoned]:
            self._joining.remove(job)
            self._reserved_rows -= job.request.rows

    def _admit(self) -> None:
        """Start encoding the waiting jobs that fit the row and request budgets (one batch at a time)."""
        if self._encoding is not None and not self._encoding.done():
            return
        batch: list[_Job] = []
        active = len(self._active) + len(self._joining)
        while self._waiting:
            job = self._waiting[0]
            fits = self._reserved_rows + job.request.rows <= self.max_rows
            if not fits or active + len(batch) >= self.max_active:
                break
            self._waiting.popleft()
            self._reserved_rows += job.request.rows
            batch.append(job)
        if batch:
            self._encoding = asyncio.create_task(self._encode(batch))

    async def _encode(self, batch: list[_Job]) -> None:
        start = time.perf_counter()
        for job in batch:
            job.encode_start = start
            if self.metrics is not None:
                self.metrics.queue_wait.labels(model=self.cap.name).observe(start - job.submitted)
        images = np.concatenate([j.request.images for j in batch])
        try:
            regions = (await self.backend.infer("visual_encoder", {"image": images}))["regions"]
            init = await self.backend.infer(self.cap.init, {"regions": regions})
        except Exception as exc:
            self._reserved_rows -= sum(j.request.rows for j in batch)
            self._fail(batch, exc)
            self._wake.set()
            return
        memory = np.ascontiguousarray(init["memory"], dtype=np.float32)
        state0 = np.ascontiguousarray(init["state"], dtype=np.float32)
        end = time.perf_counter()
        offset = 0
        for job in batch:
            n = job.request.images.shape[0]
            part = slice(offset, offset + n)
            offset += n
            if job.abandoned:
                self._reserved_rows -= job.request.rows
                continue
            job.regions, job.memory, job.state0 = regions[part], memory[part], state0[part]
            if job.request.groups > 1:
                job.search = self._grouped_search(job.request, state0[part])
            job.encode_ms = (end - start) * 1e3
            job.decode_start = end
            self._joining.append(job)
        self._wake.set()

    def _grouped_search(self, r: DecodeRequest, state0: np.ndarray) -> BeamSearch:
        """Diverse (grouped) beam search selects per group, so it runs in a ``BeamSearch`` of its own;
        its rows still go into the shared step call."""
        return BeamSearch(
            n_images=r.images.shape[0],
            beam_size=r.beam_size,
            max_length=r.max_length,
            bos=self.bos,
            eos=self.eos,
            initial_state=state0,
            length_penalty=r.length_penalty,
            banned_ids=self.banned_ids,
            min_length=r.min_length,
            logits_hook=r.logits_hook,
            groups=r.groups,
            diversity_penalty=r.diversity_penalty,
        )

    async def _iterate(self) -> None:
        side = [j for j in self._active if j.search is not None]
        batch_rows = self._batch.rows() if self._batch.keys else None
        side_rows = [j.search.rows() for j in side]  # type: ignore[union-attr]
        inputs = self._step_inputs(batch_rows, side, side_rows)
        n_rows = int(inputs["image_index"].shape[0])
        in_step = list(self._active)
        try:
            out = await self.backend.infer(self.cap.step, inputs)
        except Exception as exc:
            self._leave(in_step, exc)
            return
        self.iterations += 1
        if self.metrics is not None:
            self.metrics.beam_rows.labels(model=self.cap.step).observe(n_rows)
            self.metrics.decoded_tokens.labels(model=self.cap.name).inc(n_rows)
        logprobs, state_out = out["logprobs"], out["state_out"]
        finished: list[_Job] = []
        n_batch = 0 if batch_rows is None else int(batch_rows.rows.shape[0])
        if batch_rows is not None:
            try:
                done_keys = set(self._batch.advance(batch_rows, logprobs[:n_batch], state_out[:n_batch]))
            except Exception as exc:  # a hook raised: fail the requests in the batch
                self._leave([j for j in in_step if j.search is None], exc)
                done_keys = set()
            for job in in_step:
                if job.search is None and job.serial in done_keys:
                    job.iterations = self._batch.steps[job.serial]
                    job.hypotheses = self._batch.results(job.serial, job.request.n_best)
                    finished.append(job)
            self._batch.discard(*(j.serial for j in finished))
        at = n_batch
        for job, part in zip(side, side_rows, strict=True):
            n = part.rows.shape[0]
            chunk = slice(at, at + n)
            at += n
            assert job.search is not None
            try:
                job.search.advance(part, logprobs[chunk], state_out[chunk])
            except Exception as exc:
                self._leave([job], exc)
                continue
            if job.search.finished:
                job.iterations = job.search.steps
                job.hypotheses = job.search.results(job.request.n_best)
                finished.append(job)
        for job in finished:
            self._active.remove(job)
            self._reserved_rows -= job.request.rows
            job.decode_end = time.perf_counter()
        if finished:
            self._spawn(self._complete(finished))

    def _step_inputs(
        self, batch_rows: BatchRows | None, side: list[_Job], side_rows: list[StepRows]
    ) -> dict[str, np.ndarray]:
        parts_index, parts_tokens, parts_last, parts_len, parts_state = [], [], [], [], []
        memories: list[np.ndarray] = []
        offset = 0
        if batch_rows is not None and self._batch.memory is not None:
            memories.append(self._batch.memory)
            offset = self._batch.memory.shape[0]
            parts_index.append(batch_rows.image_index)
            parts_tokens.append(batch_rows.tokens)
            parts_last.append(batch_rows.last_token)
            parts_len.append(batch_rows.lengths)
            parts_state.append(batch_rows.state)
        for job, r in zip(side, side_rows, strict=True):
            assert job.memory is not None
            memories.append(job.memory)
            parts_index.append(r.image_index + offset)
            offset += job.memory.shape[0]
            parts_tokens.append(r.tokens)
            parts_last.append(r.tokens[:, -1])
            parts_len.append(r.lengths)
            parts_state.append(r.state)
        memory = memories[0] if len(memories) == 1 else np.concatenate(memories)
        lengths = np.concatenate(parts_len)
        if self.last_token:  # the LSTM reads only the last real token: T = 1
            tokens = np.concatenate(parts_last)[:, None]
            lengths = np.ones_like(lengths)
        else:
            width = max(t.shape[1] for t in parts_tokens)
            if self.fixed_t is not None:
                width = max(width, self.fixed_t)
            tokens = np.full((lengths.shape[0], width), self.pad, dtype=np.int64)
            row = 0
            for t in parts_tokens:
                tokens[row : row + t.shape[0], : t.shape[1]] = t
                row += t.shape[0]
        return {
            "memory": np.ascontiguousarray(memory, dtype=np.float32),
            "image_index": np.concatenate(parts_index).astype(np.int64, copy=False),
            "tokens": np.ascontiguousarray(tokens, dtype=np.int64),
            "length": lengths.astype(np.int64, copy=False),
            "state": np.ascontiguousarray(np.concatenate(parts_state), dtype=np.float32),
        }

    async def _complete(self, jobs: list[_Job]) -> None:
        """Re-rank finished jobs in batched ranker calls (one pair of calls per ranker), then answer."""
        results = {id(j): j.hypotheses or [] for j in jobs}
        scores: dict[int, list[list[float]]] = {}
        rerank_ms: dict[int, float] = {}
        by_ranker: dict[str, list[_Job]] = {}
        for job in jobs:
            if job.request.ranker is not None and not job.abandoned:
                by_ranker.setdefault(job.request.ranker, []).append(job)
        for name, group in by_ranker.items():
            start = time.perf_counter()
            regions = np.concatenate([j.regions for j in group if j.regions is not None])
            captions = [[h.tokens for h in per] for j in group for per in results[id(j)]]
            try:
                flat = await ranker_scores(
                    self.backend, self.manifest, self.manifest.ranker(name), regions, captions
                )
            except Exception as exc:
                self._fail(group, exc)
                continue
            at = 0
            for job in group:
                n = job.request.images.shape[0]
                scores[id(job)] = flat[at : at + n]
                at += n
                rerank_ms[id(job)] = (time.perf_counter() - start) * 1e3
        for job in jobs:
            if job.future.done():
                continue
            if self.metrics is not None:
                self.metrics.iterations_per_request.labels(model=self.cap.name).observe(job.iterations)
            job.future.set_result(
                DecodeResult(
                    hypotheses=results[id(job)],
                    ranker_scores=scores.get(id(job)),
                    iterations=job.iterations,
                    timings_ms={
                        "queue": (job.encode_start - job.submitted) * 1e3,
                        "encode": job.encode_ms,
                        "decode": (job.decode_end - job.decode_start) * 1e3,
                        "rerank": rerank_ms.get(id(job), 0.0),
                    },
                )
            )

    # -- helpers ----------------------------------------------------------------------------------

    def _fail(self, jobs: Sequence[_Job], exc: BaseException) -> None:
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(exc)

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.active_requests.labels(model=self.cap.name).set(self.active_requests)
            self.metrics.queue_length.labels(model=self.cap.name).set(len(self._waiting))


__all__ = ["CaptionerScheduler", "DecodeRequest", "DecodeResult", "QueueFullError"]
