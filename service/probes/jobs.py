"""Probe jobs: each probe runs as an ``asyncio`` task with an explicit status, progress and result;
``JobManager`` bounds how many run at once (the kit's ``BoundedGate``: the rest is refused with a
429 and a retry hint, never queued without end), keeps the recent ones for ``GET /v1/probes``, and
cancels on request (the task's engine requests are cancelled with it, which frees their beam rows)."""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from service.api.gate import BoundedGate
from service.probes.kind import ProbeSpec, Progress
from service.probes.kinds import KINDS

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
    task: asyncio.Task[None] | None = None

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
            "summary": self.summary(),
        }
        if full:
            body["partial"] = self.progress.partial if not self.status.terminal else None
            body["result"] = self.result
        return body


Work = Callable[[ProbeJob], Awaitable[dict[str, Any]]]


class JobManager:
    """Runs probe jobs, at most ``max_jobs`` unfinished at once; remembers the last ``keep``."""

    def __init__(
        self, max_jobs: int, keep: int = 50, on_success: Callable[[ProbeJob], None] | None = None
    ) -> None:
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.max_jobs, self.keep, self.on_success = max_jobs, keep, on_success
        self.gate = BoundedGate(
            max_jobs,
            "too_many_probes",
            "{limit} probe job(s) already running; retry after {retry_after_s:.0f} s",
            self.retry_after_s,
        )
        self._jobs: OrderedDict[str, ProbeJob] = OrderedDict()
        self._serial = itertools.count(1)

    @property
    def active(self) -> list[ProbeJob]:
        return [j for j in self._jobs.values() if not j.status.terminal]

    def retry_after_s(self) -> float:
        """When a slot should free: the soonest estimated end of a running job (1..300 s)."""
        etas = [e for e in (j.eta_s() for j in self.active) if e is not None]
        return float(min(max(min(etas, default=30.0), 1.0), 300.0))

    def submit(self, spec: ProbeSpec, work: Work, force: bool = False) -> ProbeJob:
        """Start ``work(job)``; the gate's ``BusyError`` (429) when ``max_jobs`` are unfinished
        (``force``: the schedule's own jobs, which run one at a time, are counted but never refused).
        The job holds its place until its task is done, whether it ran or was cancelled first."""
        release = self.gate.acquire(force=force)
        job = ProbeJob(f"p{next(self._serial)}-{secrets.token_hex(4)}", spec.kind, spec.to_dict(), spec)
        self._remember(job)
        job.task = asyncio.create_task(self._run(job, work), name=f"probe:{job.id}")
        job.task.add_done_callback(lambda _: release())
        return job

    def restore(self, job: ProbeJob) -> None:
        """Keep a finished job read back from the history."""
        self._remember(job)

    def get(self, job_id: str) -> ProbeJob | None:
        return self._jobs.get(job_id)

    def recent(self) -> list[ProbeJob]:
        return sorted(self._jobs.values(), key=lambda j: j.created_at, reverse=True)

    async def cancel(self, job_id: str) -> ProbeJob | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        await self._stop([job])
        return job

    async def close(self) -> None:
        await self._stop(list(self._jobs.values()))

    async def _stop(self, jobs: list[ProbeJob]) -> None:
        running = [j for j in jobs if j.task is not None and not j.task.done()]
        for job in running:
            assert job.task is not None
            job.task.cancel()
        await asyncio.gather(*(j.task for j in running if j.task is not None), return_exceptions=True)
        for job in running:
            if not job.status.terminal:  # cancelled before its task ever ran
                job.status, job.error = JobStatus.CANCELLED, CANCELLED
                job.finished_at = time.time()

    def _remember(self, job: ProbeJob) -> None:
        self._jobs[job.id] = job
        finished = [k for k, j in self._jobs.items() if j.status.terminal or j.task is None]
        while len(self._jobs) > self.keep and finished:
            self._jobs.pop(finished.pop(0), None)

    async def _run(self, job: ProbeJob, work: Work) -> None:
        job.status, job.started_at = JobStatus.RUNNING, time.time()
        try:
            job.result = await work(job)
            job.status = JobStatus.SUCCEEDED
        except asyncio.CancelledError:
            job.status, job.error = JobStatus.CANCELLED, CANCELLED
        except Exception as exc:
            log.exception("probe job %s failed", job.id)
            job.status, job.error = JobStatus.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            job.finished_at = time.time()
            job.progress.timings_s["total"] = round(job.finished_at - job.started_at, 3)
        if job.status is JobStatus.SUCCEEDED and self.on_success is not None:
            try:
                self.on_success(job)
            except Exception:
                log.exception("recording probe job %s failed", job.id)


__all__ = ["JobManager", "JobStatus", "ProbeJob"]
