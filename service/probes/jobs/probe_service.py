"""``ProbeService``: what the probe routes and the probe schedule share — the repository's probe sets,
the job manager, the parser process, the gauges and the shared state (jobs, history, baselines). A
client of the engine only: probes reach it through ``EngineClient`` (``resolve``, ``caption_many`` at
background priority).

Every replica keeps its gauges from the store (the last succeeded result and the accepted baseline of
each kind, model, ranker and probe set), refreshed every ``refresh_s``, so that the replicas' gauges
agree; exactly one replica runs the schedule: the holder of the ``probe-schedule`` lease, which keeps
with it when the next round is due, so that a replica taking over from a dead one runs the next
interval's round, not a repeat of the last."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from service.api.gate import RequestError
from service.checks import above
from service.engine.client import EngineClient
from service.manifest import Manifest
from service.probes.jobs.gauges import ProbeGauges
from service.probes.jobs.manager import JobManager, JobStatus, ProbeJob
from service.probes.jobs.probe_store import ProbeStore
from service.probes.jobs.schedule import ProbeSchedule
from service.probes.jobs.spec import build_spec
from service.probes.kinds import KINDS
from service.probes.kinds.record import KindRun, ProbeSpec
from service.probes.scoring.parser import PairParser
from service.probesets import ProbeSet, repo_probe_sets
from service.state.lease import Lease
from service.state.store import StateStore

log = logging.getLogger(__name__)


class NotComparable(ValueError):
    """Two probe jobs that cannot be compared: ``code`` (``job_not_succeeded`` or
    ``not_comparable``) and the reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProbeService:
    def __init__(
        self,
        repo: Path,
        manifest: Manifest,
        registry: CollectorRegistry,
        max_jobs: int,
        store: StateStore,
        schedule: ProbeSchedule | None = None,
        heartbeat_s: float = 2.0,
        stale_s: float = 30.0,
        lease_s: float = 30.0,
        refresh_s: float = 10.0,
    ) -> None:
        above(0, lease_s=lease_s, refresh_s=refresh_s)
        self.repo, self.manifest, self.schedule = Path(repo), manifest, schedule
        self.gauges = ProbeGauges(registry)
        self.store = ProbeStore(store)
        self.jobs = JobManager(
            max_jobs, self.store, on_success=self._record, heartbeat_s=heartbeat_s, stale_s=stale_s
        )
        self.lease = Lease(store, "probe-schedule", lease_s)
        self.refresh_s = refresh_s
        self.parser = PairParser()
        self._sets: dict[str, ProbeSet] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def use(self, manifest: Manifest, _vocab: object = None) -> None:
        """Probe with the repository as reloaded (``service.api.reload``): its probe sets are read again
        on first use; jobs running go on with the sets they started with."""
        self.manifest, self._sets = manifest, None

    def sets(self) -> dict[str, ProbeSet]:
        """The repository's probe sets (loaded on first use)."""
        if self._sets is None:
            self._sets = repo_probe_sets(self.repo, self.manifest)
        return self._sets

    def spec(self, engine: EngineClient, kind: str, search: Mapping[str, Any], **request: Any) -> ProbeSpec:
        """``build_spec`` over the repository's probe sets (``request``: probe_set, pairs, images,
        scheduled)."""
        return build_spec(engine, self.sets(), kind, search, **request)

    async def start(
        self, engine: EngineClient, spec: ProbeSpec, force: bool = False, scheduled: bool = False
    ) -> ProbeJob:
        """Start a probe job (``BusyError`` when the job limit is reached and not ``force``)."""
        probe_set = self.sets()[spec.probe_set]

        async def work(job: ProbeJob) -> dict[str, Any]:
            start = time.perf_counter()
            result = await KINDS[spec.kind].run(KindRun(engine, spec, probe_set, self.parser, job.progress))
            job.progress.timings_s["run"] = round(time.perf_counter() - start, 3)
            return result

        return await self.jobs.submit(spec, work, force=force, scheduled=scheduled)

    # -- results that outlive the job ---------------------------------------------------------------

    def _record(self, job: ProbeJob) -> None:
        if job.result is None or job.finished_at is None or job.started_at is None:
            return
        self._gauge(job)

    def _gauge(self, job: ProbeJob) -> None:
        p = job.params
        assert job.result is not None and job.finished_at is not None
        seconds = job.finished_at - (job.started_at or job.finished_at)
        self.gauges.record(
            job.kind, p["model"], p.get("rerank") or None, job.result, job.finished_at, seconds
        )

    async def accept(self, job: ProbeJob) -> ProbeJob:
        """Make a succeeded job's result the accepted baseline (gauge + store); ``ValueError`` for a
        job that did not succeed."""
        if job.status is not JobStatus.SUCCEEDED or job.result is None:
            raise ValueError(
                f"probe job {job.id} is {job.status.value}; only a succeeded job can be accepted"
            )
        accepted_at = time.time()
        await self.store.store.call(self.store.accept, job, accepted_at)
        job.accepted_at = accepted_at
        p = job.params
        self.gauges.accept(job.kind, p["model"], p.get("rerank") or None, job.result)
        return job

    def compare(self, a: ProbeJob, b: ProbeJob) -> dict[str, Any]:
        """Paired tests of job ``a``'s result against ``b``'s on the images both hold (blocking: run it
        in a thread). ``NotComparable`` naming why when they are not of one kind and probe set, one
        has not succeeded, or they share no image."""
        for job in (a, b):
            if job.status is not JobStatus.SUCCEEDED or job.result is None:
                raise NotComparable(
                    "job_not_succeeded",
                    f"probe job {job.id} is {job.status.value}; only succeeded jobs can be compared",
                )
        if a.kind != b.kind:
            raise NotComparable("not_comparable", f"probe job {a.id} is {a.kind}, {b.id} is {b.kind}")
        sa, sb = a.params.get("probe_set"), b.params.get("probe_set")
        if sa != sb:
            raise NotComparable(
                "not_comparable", f"probe job {a.id} probed the set {sa!r}, {b.id} the set {sb!r}"
            )
        kind = KINDS.get(a.kind)
        if kind is None or kind.compare is None:
            raise NotComparable("not_comparable", f"probe kind {a.kind!r} has no paired test")
        assert a.result is not None and b.result is not None
        try:
            tests = kind.compare(a.result, b.result)
        except ValueError as exc:
            raise NotComparable("not_comparable", f"probe jobs {a.id} and {b.id}: {exc}") from None
        return {"a": a.id, "b": b.id, "kind": a.kind, "probe_set": sa, **tests}

    def refresh(self) -> int:
        """Gauges from the store: the last result and the baseline of each kind, model, ranker and
        probe set, whichever replica wrote them (blocking); the number of results read."""
        latest = self.store.latest()
        for job in latest:
            try:
                self._gauge(job)
            except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as exc:
                log.warning("probe result %s left out of the gauges: %s", job.id, exc)
        for record in self.store.baselines():
            try:
                ranker = record["ranker"] or None
                self.gauges.accept(str(record["kind"]), record["model"], ranker, record["result"])
            except (KeyError, TypeError, AttributeError) as exc:
                log.warning("probe baseline skipped: %s", exc)
        return len(latest)

    async def _refreshing(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.store.store.call(self.refresh)
            except Exception:
                log.exception("refreshing the probe gauges from the state store failed")

    def run(self, engine_ready: Callable[[], EngineClient | None]) -> None:
        """While the app runs: the heartbeats, the gauge refresh and (with a schedule) the schedule."""
        self.jobs.start()
        self._tasks.append(asyncio.create_task(self._refreshing(), name="probe-refresh"))
        if self.schedule is not None:
            self._tasks.append(asyncio.create_task(self._scheduled(engine_ready), name="probe-schedule"))

    # -- the schedule -------------------------------------------------------------------------------

    async def _scheduled(self, engine_ready: Callable[[], EngineClient | None]) -> None:
        assert self.schedule is not None
        while (engine := engine_ready()) is None:
            await asyncio.sleep(0.5)
        call, renew = self.store.store.call, self.lease.ttl_s / 3
        while True:
            try:
                held = await call(self.lease.try_acquire)
            except Exception:
                log.exception("the probe schedule's lease could not be read")
                held = False
            self.gauges.leader.set(1 if held else 0)
            if not held:
                await asyncio.sleep(renew)
                continue
            now = time.time()
            due = float((await call(self.lease.data)).get("next_due", 0.0))
            if now < due:
                await asyncio.sleep(min(due - now, renew))
                continue
            plan = {
                "next_due": now + self.schedule.interval_s,
                "round_started": now,
                "by": self.store.replica,
            }
            if await call(self.lease.set_data, plan):
                await self._round_holding_lease(engine)

    async def _round_holding_lease(self, engine: EngineClient) -> None:
        """One round of the schedule, renewing the lease while it runs (cancelled if the lease is lost)."""
        assert self.schedule is not None
        round_ = asyncio.create_task(self._round(engine), name="probe-schedule-round")
        while not round_.done():
            await asyncio.wait({round_}, timeout=self.lease.ttl_s / 3)
            if round_.done():
                break
            try:
                held = await self.store.store.call(self.lease.try_acquire)
            except Exception:
                log.exception("renewing the probe schedule's lease failed")
                continue  # it may still be ours: the next renewal tells
            if not held:
                log.warning("the probe schedule's lease went to another replica; this round stops")
                self.gauges.leader.set(0)
                round_.cancel()
        await asyncio.gather(round_, return_exceptions=True)

    async def _round(self, engine: EngineClient) -> None:
        assert self.schedule is not None
        for model, ranker in self.schedule.runs:
            for kind in self.schedule.kinds:
                await self._one_scheduled(engine, kind, model, ranker)

    async def _one_scheduled(
        self, engine: EngineClient, kind: str, model: str | None, ranker: str | None
    ) -> None:
        assert self.schedule is not None
        try:
            spec = self.spec(
                engine, kind, self.schedule.search(model, ranker), images=self.schedule.images, scheduled=True
            )
        except (RequestError, ValueError) as exc:
            log.warning("scheduled %s probe of %s skipped: %s", kind, model or "the default captioner", exc)
            return
        job = await self.start(engine, spec, force=True, scheduled=True)
        if job.task is not None:  # a cancelled round cancels its job too (gather passes it on)
            await asyncio.gather(job.task, return_exceptions=True)
        if job.status is not JobStatus.SUCCEEDED:
            log.warning("scheduled probe %s ended %s: %s", job.id, job.status.value, job.error)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.jobs.close()
        if self.schedule is not None:
            try:  # another replica need not wait for the lease to expire
                await self.store.store.call(self.lease.release)
            except Exception:
                log.exception("releasing the probe schedule's lease failed")
        self.parser.close()


__all__ = ["NotComparable", "ProbeService"]
