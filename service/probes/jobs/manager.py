"""Probe jobs: each probe runs as an ``asyncio`` task on the replica that accepted it, with an explicit
status, progress and result kept in the shared state (``service.probes.jobs.probe_store``), so that every
replica answers ``GET``, ``DELETE`` and ``accept`` for any job. ``JobManager`` bounds how many run here at
once (the kit's ``BoundedGate``: the rest is refused with a 429 and a retry hint, never queued without
end), writes its jobs' progress every heartbeat, cancels on request — its own, or another replica's read
at the next heartbeat (the task's engine requests are cancelled with it, which frees their beam rows) —
and sweeps the jobs of replicas that died."""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.api.gate import BoundedGate
from service.checks import above, at_least
from service.probes.kinds import KINDS
from service.probes.kinds.record import ProbeSpec, Progress
from service.state.store import StateStore

log = logging.getLogger(__name__)
CANCELLED = "cancelled (DELETE /v1/probes/{id}, or the gateway shut down)"


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(eq=False)
class ProbeJob:
    id: str
    kind: str
    params: dict[str, Any]  # ``ProbeSpec.to_dict()``: what was asked, as the API shows it
    spec: ProbeSpec | None = None  # None for a job read back from the history
    status: JobStatus = JobStatus.QUEUED
    progress: Progress = field(default_factory=Progress)
    result: dict[str, Any] | None = None
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    accepted_at: float | None = None  # when an operator accepted the result as the baseline
    replica: str = ""  # the replica that runs (ran) it
    scheduled: bool = False  # started by the probe schedule
    cancel_requested: bool = False  # another replica asked its runner to cancel it
    task: asyncio.Task[None] | None = None  # on the replica that runs it

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far (None before any image is done)."""
        p = self.progress
        if self.started_at is None or p.done == 0 or p.total == 0:
            return None
        rate = p.done / max(time.time() - self.started_at, 1e-6)
        return max(p.total - p.done, 0) / rate

    def summary(self) -> str | None:
        """The kind's one-line summary of the result (or of the partial result while it runs)."""
        kind = KINDS.get(self.kind)
        shown = self.result if self.result is not None else self.progress.partial
        if kind is None or kind.summary is None or shown is None:
            return None
        return kind.summary(shown) or None

    def view(self, full: bool = True) -> dict[str, Any]:
        """The job's JSON body (``full``: with partial and final result)."""
        body: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "status": self.status.value,
            "error": self.error,
            "params": dict(self.params),
            "probe_set": self.params.get("probe_set"),
            "progress": {"done": self.progress.done, "total": self.progress.total},
            "timings_s": dict(self.progress.timings_s),
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "accepted_at": self.accepted_at,
            "replica": self.replica,
            "scheduled": self.scheduled,
            "cancel_requested": self.cancel_requested,
            "summary": self.summary(),
        }
        if full:
            body["partial"] = self.progress.partial if not self.status.terminal else None
            body["result"] = self.result
        return body


Work = Callable[[ProbeJob], Awaitable[dict[str, Any]]]


class JobStore(Protocol):
    """Where the jobs of every replica are kept (``service.probes.jobs.probe_store.ProbeStore``);
    blocking calls."""

    store: StateStore

    @property
    def replica(self) -> str: ...

    def insert(self, job: ProbeJob) -> None: ...

    def heartbeat(self, jobs: list[ProbeJob]) -> set[str]: ...

    def finish(self, job: ProbeJob) -> None: ...

    def get(self, job_id: str) -> ProbeJob | None: ...

    def recent(self, limit: int) -> list[ProbeJob]: ...

    def request_cancel(self, job_id: str, stale_s: float) -> None: ...

    def sweep(self, stale_s: float) -> list[str]: ...


class JobManager:
    """Runs probe jobs here, at most ``max_jobs`` unfinished at once, and keeps every replica's in the
    store: the newest ``keep`` are listed. ``heartbeat_s``: how often running jobs are written and
    cancel requests read; ``stale_s``: how long a runner may stay silent before its jobs are failed."""

    def __init__(
        self,
        max_jobs: int,
        store: JobStore,
        keep: int = 50,
        on_success: Callable[[ProbeJob], None] | None = None,
        heartbeat_s: float = 2.0,
        stale_s: float = 30.0,
    ) -> None:
        at_least(1, max_jobs=max_jobs, keep=keep)
        above(0, heartbeat_s=heartbeat_s)
        if stale_s <= 2 * heartbeat_s:
            raise ValueError(f"stale_s must be > 2 * heartbeat_s ({2 * heartbeat_s:g}), got {stale_s}")
        self.max_jobs, self.keep, self.on_success = max_jobs, keep, on_success
        self.store, self.heartbeat_s, self.stale_s = store, heartbeat_s, stale_s
        self.gate = BoundedGate(
            max_jobs,
            "too_many_probes",
            "{limit} probe job(s) already running; retry after {retry_after_s:.0f} s",
            self.retry_after_s,
        )
        self._local: dict[str, ProbeJob] = {}  # this replica's unfinished jobs
        self._serial = itertools.count(1)
        self._beats: asyncio.Task[None] | None = None

    @property
    def active(self) -> list[ProbeJob]:
        return [j for j in self._local.values() if not j.status.terminal]

    def retry_after_s(self) -> float:
        """When a slot should free: the soonest estimated end of a running job (1..300 s)."""
        etas = [e for e in (j.eta_s() for j in self.active) if e is not None]
        return float(min(max(min(etas, default=30.0), 1.0), 300.0))

    async def submit(
        self, spec: ProbeSpec, work: Work, force: bool = False, scheduled: bool = False
    ) -> ProbeJob:
        """Start ``work(job)``; the gate's ``BusyError`` (429) when ``max_jobs`` are unfinished here
        (``force``: the schedule's own jobs, which run one at a time, are counted but never refused).
        The job holds its place until its task is done, whether it ran or was cancelled first."""
        release = self.gate.acquire(force=force)
        try:
            job = ProbeJob(f"p{next(self._serial)}-{secrets.token_hex(4)}", spec.kind, spec.to_dict(), spec)
            job.replica, job.scheduled = self.store.replica, scheduled
            await self.store.store.call(self.store.insert, job)
        except BaseException:
            release()
            raise
        self._local[job.id] = job
        job.task = asyncio.create_task(self._run(job, work), name=f"probe:{job.id}")
        job.task.add_done_callback(lambda _: release())
        return job

    async def get(self, job_id: str) -> ProbeJob | None:
        """The job, from this replica when it runs here (the freshest), else from the store."""
        job = self._local.get(job_id)
        if job is not None:
            return job
        return await self.store.store.call(self.store.get, job_id)

    async def recent(self) -> list[ProbeJob]:
        """The newest ``keep`` jobs of every replica, newest first (this replica's as it has them)."""
        jobs = await self.store.store.call(self.store.recent, self.keep)
        return [self._local.get(j.id, j) for j in jobs]

    async def cancel(self, job_id: str) -> ProbeJob | None:
        """Cancel a job here, or ask its replica to and wait (up to three heartbeats) for it to end."""
        job = self._local.get(job_id)
        if job is not None:
            await self._stop([job])
            return job
        call = self.store.store.call
        await call(self.store.request_cancel, job_id, self.stale_s)
        deadline = time.monotonic() + 3 * self.heartbeat_s + 1.0
        while True:
            job = await call(self.store.get, job_id)
            if job is None or job.status.terminal or time.monotonic() > deadline:
                return job
            await asyncio.sleep(min(0.2, self.heartbeat_s / 4))

    def start(self) -> None:
        """Begin the heartbeats (while the app runs)."""
        if self._beats is None:
            self._beats = asyncio.create_task(self._heartbeats(), name="probe-heartbeats")

    async def close(self) -> None:
        """Cancel this replica's jobs (written as cancelled) and stop the heartbeats."""
        await self._stop(list(self._local.values()))
        if self._beats is not None:
            self._beats.cancel()
            await asyncio.gather(self._beats, return_exceptions=True)

    async def beat(self) -> None:
        """One heartbeat: write the running jobs, cancel those another replica asked to, sweep the
        jobs of silent replicas."""
        call = self.store.store.call
        running = [j for j in self._local.values() if not j.status.terminal]
        asked = await call(self.store.heartbeat, running)
        stop = [self._local[i] for i in asked if i in self._local]
        if stop:
            log.info("cancelling probe job(s) %s at another replica's request", ", ".join(j.id for j in stop))
            await self._stop(stop)
        swept = await call(self.store.sweep, self.stale_s)
        if swept:
            log.warning("probe job(s) %s failed: their replica stopped writing", ", ".join(swept))

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.beat()
            except Exception:  # the store is away: jobs go on, and the next beat tries again
                log.exception("probe heartbeat failed")

    async def _stop(self, jobs: list[ProbeJob]) -> None:
        running = [j for j in jobs if j.task is not None and not j.task.done()]
        for job in running:
            assert job.task is not None
            job.task.cancel()
        await asyncio.gather(*(j.task for j in running if j.task is not None), return_exceptions=True)
        for job in running:
            if not job.status.terminal:  # cancelled before its task ever ran
                job.status, job.error, job.finished_at = JobStatus.CANCELLED, CANCELLED, time.time()
                await self._finish(job)

    async def _finish(self, job: ProbeJob) -> None:
        try:
            await self.store.store.call(self.store.finish, job)
        except Exception:
            log.exception("writing the end of probe job %s failed", job.id)
        finally:
            self._local.pop(job.id, None)

    async def _run(self, job: ProbeJob, work: Work) -> None:
        try:
            job.status, job.started_at = JobStatus.RUNNING, time.time()
            try:  # every replica sees it running from now on, not from the next heartbeat
                await self.store.store.call(self.store.heartbeat, [job])
            except Exception:
                log.exception("writing the start of probe job %s failed", job.id)
            job.result = await work(job)
            job.status = JobStatus.SUCCEEDED
        except asyncio.CancelledError:
            job.status, job.error = JobStatus.CANCELLED, CANCELLED
        except Exception as exc:
            log.exception("probe job %s failed", job.id)
            job.status, job.error = JobStatus.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            job.finished_at = time.time()
            job.progress.timings_s["total"] = round(job.finished_at - (job.started_at or job.finished_at), 3)
        await self._finish(job)
        if job.status is JobStatus.SUCCEEDED and self.on_success is not None:
            try:
                self.on_success(job)
            except Exception:
                log.exception("recording probe job %s failed", job.id)


__all__ = ["CANCELLED", "JobManager", "JobStatus", "JobStore", "ProbeJob"]
