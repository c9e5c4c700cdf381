"""Iteration-level batching of beam search across requests (Orca / vLLM ``EngineCore.step`` style), one
loop per captioner: **plan** the iteration → **runner** call → **update** the batch.

- plan: drop requests past their deadline or abandoned by their caller (their rows are freed before the
  next step call); move encoded requests into the ``BeamBatch``; admit waiting requests, in priority
  order, as far as the row budget (``max_rows_per_step``: images × beam size per request) and
  ``max_active_requests`` allow — background requests (probes, studies) only within
  ``max_background_rows`` while any user request is in the scheduler, and paced to
  ``background_share`` of the time (after a background request held rows for t seconds, the next
  waits t × (1/share − 1)), so that they fill the capacity users leave — and start encoding them
  (``visual_encoder`` + ``<cap>_init``, one batched call for all of them) while the others keep decoding;
- runner: ONE ``<cap>_step`` call with every live row of every decoding request;
- update: advance the batch; requests whose search is done leave at once and are re-ranked off the
  loop, one ``<ranker>_image`` + ``<ranker>_text`` call per ranker for all of them.

Every request leaves through ``_release``, the one place that frees its rows and answers its caller.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from service.engine.beam_batch import BatchRows, Joining, request_spans
from service.engine.cohorts import COHORT_BOUNDS, CohortBatch
from service.engine.domain import DomainModel
from service.engine.guide import GuidedRows, GuideState, guide_step
from service.engine.limits import QueueFullError
from service.engine.observer import StepObserver
from service.engine.params import SearchParams
from service.engine.request import DecodeResult, Priority, Request, RequestStatus
from service.engine.rerank import rank_finished
from service.engine.runner import Encoded, ModelRunner, StepInput, StepOutput
from service.engine.settings import EngineSettings
from service.engine.sparse import SPARSE_MIN_VOCAB, top_k_for
from service.engine.tokens import token_ids
from service.manifest import CaptionerEntry
from service.metrics import Metrics

log = logging.getLogger(__name__)
S = RequestStatus
RECHECK_S = 0.05  # a background request held back by other captioners' users looks again after this


class Scheduler:
    """The decoding loop of one captioner. ``submit`` is the only entry point; ``close`` stops it."""

    def __init__(
        self,
        runner: ModelRunner,
        captioner: CaptionerEntry,
        settings: EngineSettings,
        banned_ids: Sequence[int],
        metrics: Metrics | None = None,
        users_anywhere: Callable[[], int] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        domain: DomainModel | None = None,
    ) -> None:
        """``users_anywhere``: user requests in every scheduler sharing these cores (the engine's); a
        background request yields to users of another captioner as to its own. None: this one only.
        ``decode``: the captioner's token ids to text, for rankers that read the captions' text."""
        self.runner, self.cap, self.settings, self.metrics = runner, captioner, settings, metrics
        self.decode, self.domain = decode, domain
        self._users_anywhere = users_anywhere
        ids = token_ids(runner.manifest, captioner.name)
        length = min(settings.max_length_cap, captioner.max_length)
        cohorts = COHORT_BOUNDS if settings.beam_cohorts else ()  # (): one array as wide as the widest
        self._batch = CohortBatch(settings.max_beam_size, length, ids.bos, ids.eos, banned_ids, cohorts)
        self._eos = ids.eos
        self._guided: dict[int, Request] = {}  # decoding requests with the ranker_guided hook
        self._banned = len(set(banned_ids))
        self._vocab = runner.vocab_size(captioner.name)
        self._waiting: list[tuple[int, int, Request]] = []  # heap of (priority, key, request)
        self._n_waiting = 0  # requests of ``_waiting`` still WAITING (``queue_length``)
        self._live: dict[int, Request] = {}  # every request waiting, encoding or decoding, by key
        self._deadlines: list[tuple[float, int]] = []  # heap of (deadline, key) of ``_live``'s requests
        self._gone: list[Request] = []  # requests whose caller stopped waiting (``submit``)
        self._encoding_requests: list[Request] = []
        self._encoded: list[Request] = []
        self._decoding: dict[int, Request] = {}
        self._reserved_rows = 0
        self._background_rows = 0  # of ``_reserved_rows``, held by background requests
        self._background_after = 0.0  # perf_counter before which no background request is admitted
        self._serial = 0
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._encoding: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self.iterations = 0  # step calls made
        if metrics is not None:  # this loop's labelled series, looked up once (labels() costs per call)
            self._beam_rows = metrics.beam_rows.labels(model=captioner.step)
            self._decoded_tokens = metrics.decoded_tokens.labels(model=captioner.name)
            self._active_gauge = metrics.active_requests.labels(model=captioner.name)
            self._queue_gauge = metrics.queue_length.labels(model=captioner.name)

    @property
    def active_requests(self) -> int:
        return len(self._encoding_requests) + len(self._encoded) + len(self._decoding)

    @property
    def user_requests(self) -> int:
        """User requests waiting, encoding or decoding (background work yields to them)."""
        stages = [
            (r for *_, r in self._waiting),
            self._encoding_requests,
            self._encoded,
            self._decoding.values(),
        ]
        return sum(
            1 for stage in stages for r in stage if r.priority is Priority.USER and not r.status.terminal
        )

    @property
    def users_anywhere(self) -> int:
        """User requests here or, with ``users_anywhere`` given, in any scheduler of the engine."""
        return self.user_requests if self._users_anywhere is None else self._users_anywhere()

    @property
    def queue_length(self) -> int:
        return self._n_waiting

    async def submit(
        self,
        images: np.ndarray,
        params: SearchParams,
        timeout_s: float,
        priority: Priority = Priority.USER,
        observer: StepObserver | None = None,
    ) -> DecodeResult:
        """Decode ``images`` (uint8 [I, H, W, 3]) with ``params`` within ``timeout_s``; raises
        ``QueueFullError`` at once when the queue is full and ``TimeoutError`` past the deadline."""
        if self._closed:
            raise RuntimeError("the scheduler is closed")
        if params.model != self.cap.name:
            raise ValueError(f"params are for {params.model!r}, this scheduler decodes {self.cap.name!r}")
        if params.rows(len(images)) > self.settings.max_rows_per_step:
            raise ValueError(
                f"images × beam_size = {params.rows(len(images))} exceeds {self.settings.max_rows_per_step}"
            )
        if self.queue_length >= self.settings.max_queue:
            raise QueueFullError(retry_after_s=1.0)
        self._ensure_loop()
        self._serial += 1
        request = Request(
            key=self._serial,
            images=images,
            params=params,
            future=asyncio.get_running_loop().create_future(),
            deadline=time.monotonic() + timeout_s,
            priority=priority,
            observer=observer,
        )
        heapq.heappush(self._waiting, (int(priority), request.key, request))
        self._n_waiting += 1
        self._live[request.key] = request
        heapq.heappush(self._deadlines, (request.deadline, request.key))
        self._gauge()
        self._wake.set()
        try:
            async with asyncio.timeout(timeout_s):
                # not shielded: a caller that stops waiting (its deadline, a disconnect) cancels the
                # future itself, and the loop releases the request (and its rows) before its next step
                return await request.future
        finally:
            if request.future.cancelled() or not request.future.done():
                request.future.cancel()
                self._gone.append(request)
                self._wake.set()

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._loop_task, self._encoding, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        everyone = [r for *_, r in self._waiting] + self._encoding_requests + self._encoded
        self._release(
            [*everyone, *self._decoding.values()], S.FAILED, RuntimeError("the scheduler was closed")
        )

    # -- the loop -------------------------------------------------------------------------------------

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(), name=f"scheduler:{self.cap.name}")

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                rows = self._plan()
                if rows is not None:
                    stepped = list(self._decoding.values())
                    out = await self._execute(rows, stepped)
                    if out is not None and self._guided:
                        out = await self._guide(rows, out)
                    if out is not None:
                        self._update(rows, out, stepped)
                    continue
            except Exception as exc:  # a bug must not leave requests hanging: fail the batch, go on
                log.exception("scheduler iteration failed")
                self._release(list(self._decoding.values()), S.FAILED, exc)
                continue
            await self._wake.wait()

    def _plan(self) -> BatchRows | None:
        """Expire, join, admit; the rows of the next step call (None: nothing is decoding)."""
        self._expire()
        self._join()
        self._admit()
        self._gauge()
        return self._batch.rows() if self._decoding else None

    async def _execute(self, rows: BatchRows, stepped: list[Request]) -> StepOutput | None:
        assert self._batch.memory is not None
        try:
            call = StepInput(self._batch.memory, rows.image_index, rows.tokens, rows.lengths, rows.state)
            out = await self.runner.step(self.cap.name, call, self._top_k())
        except Exception as exc:
            self._release(stepped, S.FAILED, exc)
            return None
        self.iterations += 1
        if self.metrics is not None:
            n = int(rows.rows.shape[0])
            self._beam_rows.observe(n)
            self._decoded_tokens.inc(n)
            hooks = Counter(name for request in stepped for name in request.params.hook_names)
            for name, count in hooks.items():
                self.metrics.hook_applications.labels(hook=name).inc(count)
        return out

    async def _guide(self, rows: BatchRows, out: StepOutput) -> StepOutput | None:
        """The ``ranker_guided`` requests' rows of this step shaped by their rankers
        (``service.engine.guide``: one ranker text call per ranker for all of them); None when the
        ranker failed (those requests fail; the others' step is made again)."""
        keys, image = self._batch.row_owners(rows)
        spans = request_spans(keys)
        guided: list[GuidedRows] = []
        for key, request in self._guided.items():
            span = spans.get(key)
            guide = request.params.guide
            if span is None or guide is None or request.guide is None or request.encoded is None:
                continue
            a, b = span
            regions, lp = request.encoded.regions, request.params.length_penalty
            guided.append(GuidedRows(request.guide, guide, regions, request.images, a, b, image[a:b], lp))
        if not guided:
            return out
        if not isinstance(out.logprobs, np.ndarray):
            raise TypeError("a ranker_guided step needs whole log-prob rows")
        try:
            logprobs = await guide_step(
                self.runner,
                guided,
                rows.tokens,
                rows.lengths,
                out.logprobs,
                self._eos,
                self.decode,
                word_ids=self.cap.tokens is None,
            )
        except Exception as exc:
            self._release(list(self._guided.values()), S.FAILED, exc)
            return None
        return StepOutput(logprobs, out.state, out.attention)

    def _top_k(self) -> int | None:
        """The words per row a step returns (``service.engine.sparse``): for a vocabulary of real size
        while no request reads whole rows (nor is ``ranker_guided``), the widest beam's best (plus the
        end and banned words); else None: whole rows."""
        if self._vocab < SPARSE_MIN_VOCAB or self._batch.reads_whole_rows or self._guided:
            return None
        k = top_k_for(self._batch.capacity, self._banned + self._batch.sparse_budget)
        return k if 4 * k <= self._vocab else None

    def _update(self, rows: BatchRows, out: StepOutput, stepped: list[Request]) -> None:
        live = [r for r in stepped if r.status is S.DECODING]  # not released while the step ran
        if len(live) != len(stepped):
            return  # the batch changed under the step call: its output no longer lines up; redo
        update = self._batch.advance(rows, out.logprobs, out.state, out.attention)
        for key, exc in update.failed.items():
            self._release([self._decoding[key]], S.FAILED, exc)
        finished = [self._decoding[key] for key in update.finished]
        now = time.perf_counter()
        for request in finished:
            request.iterations = self._batch.steps[request.key]
            request.hypotheses = self._batch.results(request.key, request.params.search_n_best)
            request.decode_end = now
        self._leave_batch(finished, S.RANKING)
        if finished:
            self._spawn(self._rank(finished))

    # -- stages ---------------------------------------------------------------------------------------

    def _expire(self) -> None:
        """Release requests past their deadline or abandoned by their caller, from every stage: the
        deadlines from a heap (nothing to look at until the earliest passes), the abandoned among the
        requests that hold rows by a look at each, the waiting ones as their callers stop waiting
        (``submit``; ``_admit`` skips one whose caller stopped in between)."""
        now = time.monotonic()
        overdue, gone = [], []
        seen: set[int] = set()
        for request in self._gone:
            if request.abandoned and request.key in self._live and request.key not in seen:
                gone.append(request)
                seen.add(request.key)
        self._gone.clear()
        for stage in (self._encoding_requests, self._encoded, self._decoding.values()):
            for request in stage:
                if request.abandoned and request.key not in seen:
                    gone.append(request)
                    seen.add(request.key)
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] < now:
            _, key = heapq.heappop(deadlines)
            late = self._live.get(key)
            if late is None or late.status.terminal or key in seen:
                continue
            if late.abandoned:
                gone.append(late)
            elif now > late.deadline:
                overdue.append(late)
        if len(deadlines) > 2 * len(self._live) + 64:  # mostly requests that left: drop them
            self._deadlines = [e for e in deadlines if e[1] in self._live]
            heapq.heapify(self._deadlines)
        self._count_abandoned(overdue, "deadline")
        self._count_abandoned(gone, "disconnect")
        self._release(overdue, S.CANCELLED, TimeoutError("deadline exceeded"))
        self._release(gone, S.CANCELLED)
        if overdue or gone:
            self._waiting = [e for e in self._waiting if not e[2].status.terminal]
            heapq.heapify(self._waiting)

    def _count_abandoned(self, requests: Sequence[Request], reason: str) -> None:
        if self.metrics is not None:
            for request in requests:
                stage = request.status.value
                self.metrics.abandoned.labels(model=self.cap.name, stage=stage, reason=reason).inc()

    def _join(self) -> None:
        """Move encoded requests into the decoding batch (between step calls only)."""
        joining = [r for r in self._encoded if r.status is S.ENCODING and r.encoded is not None]
        self._encoded.clear()
        self._batch.add_many(
            [
                Joining(r.key, r.encoded.memory, r.encoded.state, r.params, r.observer)
                for r in joining
                if r.encoded
            ]
        )
        for request in joining:
            request.status = S.DECODING
            self._decoding[request.key] = request
            if request.params.guide is not None:
                request.guide = GuideState()
                self._guided[request.key] = request

    def _admit(self) -> None:
        """Start encoding the waiting requests that fit the row and request budgets (one batch at a time)."""
        if self._encoding is not None and not self._encoding.done():
            return
        admitted: list[Request] = []
        users: int | None = None  # counted once, and only if a background request reaches the head
        while self._waiting:
            request = self._waiting[0][2]
            if request.status.terminal:
                heapq.heappop(self._waiting)
                continue
            if request.abandoned:  # its caller stopped waiting since ``_expire``
                heapq.heappop(self._waiting)
                self._count_abandoned([request], "disconnect")
                self._release([request], S.CANCELLED)
                continue
            fits = self._reserved_rows + request.rows <= self.settings.max_rows_per_step
            background = request.priority is Priority.BACKGROUND
            if background and users is None:
                users = self.users_anywhere + sum(r.priority is Priority.USER for r in admitted)
            if background and users:
                budget = self.settings.max_background_rows
                fits = fits and (budget is None or self._background_rows + request.rows <= budget)
                fits = fits and time.perf_counter() >= self._background_after
            if not fits or self.active_requests + len(admitted) >= self.settings.max_active_requests:
                if background and users and not self.user_requests:
                    # held back by another captioner's users: nothing here will wake this loop when
                    # they leave, so look again shortly
                    asyncio.get_running_loop().call_later(RECHECK_S, self._wake.set)
                break  # the heap puts users first: whatever waits behind a background request is background
            heapq.heappop(self._waiting)
            request.status, request.holds_rows = S.ENCODING, True
            self._n_waiting -= 1
            self._reserved_rows += request.rows
            self._background_rows += request.rows if background else 0
            admitted.append(request)
        if admitted:
            self._encoding_requests = admitted
            self._encoding = asyncio.create_task(self._encode(admitted))

    async def _encode(self, requests: list[Request]) -> None:
        start = time.perf_counter()
        for request in requests:
            request.encode_start = start
            if self.metrics is not None:
                self.metrics.queue_wait.labels(model=self.cap.name).observe(start - request.submitted)
        images = np.concatenate([r.images for r in requests])
        try:
            enc = await self.runner.encode(self.cap.name, images)
        except Exception as exc:
            self._release(requests, S.FAILED, exc)
            self._encoding_requests = []
            self._wake.set()
            return
        end = time.perf_counter()
        judged = None
        if self.domain is not None:  # how like its validation images each image is: one call for all,
            features = enc.regions if enc.regions.size else enc.memory  # off the loop (pixel statistics)
            judged = await asyncio.to_thread(self.domain.judge, images, features)
        at = 0
        for request in requests:
            part = slice(at, at + request.n_images)
            at += request.n_images
            request.encoded = Encoded(enc.regions[part], enc.memory[part], enc.state[part])
            request.decode_start = end
            if judged is not None:
                request.domain = (judged[0][part].tolist(), judged[1][part].tolist())
        self._encoded.extend(r for r in requests if r.status is S.ENCODING)
        self._encoding_requests = []
        self._wake.set()

    async def _rank(self, requests: list[Request]) -> None:
        """Re-rank finished requests in batched ranker calls (one pair of calls per ranker), then answer."""
        scores, rerank_ms, failed = await rank_finished(
            self.runner, requests, self.decode, word_ids=self.cap.tokens is None
        )
        for group, exc in failed:
            self._release(group, S.FAILED, exc)
        for request in requests:
            if request.status.terminal:
                continue
            if self.metrics is not None:
                self.metrics.iterations_per_request.labels(model=self.cap.name).observe(request.iterations)
            result = DecodeResult(
                hypotheses=request.hypotheses or [],
                ranker_scores=scores.get(request.key),
                iterations=request.iterations,
                timings_ms=request.timings_ms(rerank_ms.get(request.key, 0.0)),
                domain=request.domain,
            )
            if request.future.done():  # its caller stopped waiting while it was ranked
                self._count_abandoned([request], "disconnect")
                request.status = S.CANCELLED
                continue
            request.future.set_result(result)
            request.status = S.FINISHED

    # -- leaving --------------------------------------------------------------------------------------

    def _leave_batch(self, requests: Sequence[Request], status: RequestStatus) -> None:
        """Take ``requests`` out of the beam batch and the row budget, into ``status``."""
        for request in requests:
            if request.holds_rows:
                self._reserved_rows -= request.rows
                if request.priority is Priority.BACKGROUND:
                    self._background_rows -= request.rows
                    self._pace(request)
                request.holds_rows = False
            self._decoding.pop(request.key, None)
            self._guided.pop(request.key, None)
            self._live.pop(request.key, None)
            if request.status is S.WAITING:
                self._n_waiting -= 1
            request.status = status
        self._batch.discard(*(r.key for r in requests))

    def _release(
        self, requests: Sequence[Request], status: RequestStatus, exc: BaseException | None = None
    ) -> None:
        """The one way out for a request that does not finish: rows freed, status set, caller answered."""
        requests = [r for r in requests if not r.status.terminal]
        self._leave_batch(requests, status)
        for request in requests:
            if exc is not None and not request.future.done():
                request.future.set_exception(exc)
        if requests:
            self._wake.set()

    def _pace(self, request: Request) -> None:
        """After a background request held rows for t s while users decode, hold the next one back for
        t × (1/share − 1) s (and wake the loop then)."""
        share = self.settings.background_share
        if share >= 1.0 or not self.users_anywhere or not request.encode_start:
            return
        now = time.perf_counter()
        gap = (now - request.encode_start) * (1.0 / share - 1.0)
        self._background_after = max(self._background_after, now + gap)
        asyncio.get_running_loop().call_later(gap, self._wake.set)

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _gauge(self) -> None:
        if self.metrics is not None:
            self._active_gauge.set(self.active_requests)
            self._queue_gauge.set(self.queue_length)
