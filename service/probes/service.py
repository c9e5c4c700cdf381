"""``ProbeService``: what the probe routes and the probe schedule share — the repository's probe sets,
the job manager, the parser process, the gauges and the history file. A client of the engine only:
probes reach it through ``CaptionEngine`` (``resolve``, ``caption_many`` at background priority)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from service.api.gate import RequestError
from service.engine.engine import CaptionEngine
from service.manifest import Manifest
from service.probes.gauges import ProbeGauges
from service.probes.history import ProbeHistory
from service.probes.jobs import JobManager, JobStatus, ProbeJob
from service.probes.kind import ProbeSpec
from service.probes.kinds import KINDS
from service.probes.parser import PairParser
from service.probes.schedule import ProbeSchedule
from service.probes.sets import ProbeSet, repo_probe_sets
from service.probes.spec import build_spec

log = logging.getLogger(__name__)


class ProbeService:
    def __init__(
        self,
        repo: Path,
        manifest: Manifest,
        registry: CollectorRegistry,
        max_jobs: int,
        history: Path | None = None,
        schedule: ProbeSchedule | None = None,
    ) -> None:
        self.repo, self.manifest, self.schedule = Path(repo), manifest, schedule
        self.gauges = ProbeGauges(registry)
        self.history = ProbeHistory(history) if history is not None else None
        self.jobs = JobManager(max_jobs, on_success=self._record)
        self.parser = PairParser()
        self._sets: dict[str, ProbeSet] | None = None
        self._schedule_task: asyncio.Task[None] | None = None

    def sets(self) -> dict[str, ProbeSet]:
        """The repository's probe sets (loaded on first use)."""
        if self._sets is None:
            self._sets = repo_probe_sets(self.repo, self.manifest)
        return self._sets

    def spec(
        self,
        engine: CaptionEngine,
        kind: str,
        search: Mapping[str, Any],
        probe_set: str | None = None,
        pairs: Sequence[str] | None = None,
        images: int | None = None,
        scheduled: bool = False,
    ) -> ProbeSpec:
        return build_spec(engine, self.sets(), kind, search, probe_set, pairs, images, scheduled)

    def start(self, engine: CaptionEngine, spec: ProbeSpec, force: bool = False) -> ProbeJob:
        """Start a probe job (``BusyError`` when the job limit is reached and not ``force``)."""
        probe_set = self.sets()[spec.probe_set]

        async def work(job: ProbeJob) -> dict[str, Any]:
            start = time.perf_counter()
            result = await KINDS[spec.kind].run(engine, spec, probe_set, self.parser, job.progress)
            job.progress.timings_s["run"] = round(time.perf_counter() - start, 3)
            return result

        return self.jobs.submit(spec, work, force=force)

    # -- results that outlive the job ---------------------------------------------------------------

    def _record(self, job: ProbeJob) -> None:
        if job.result is None or job.finished_at is None or job.started_at is None:
            return
        self._gauge(job.view(), job.finished_at - job.started_at)
        if self.history is not None:
            self.history.append(job.view())

    def _gauge(self, body: Mapping[str, Any], seconds: float) -> None:
        p = body["params"]
        self.gauges.record(
            body["kind"], p["model"], p.get("rerank") or None, body["result"], body["finished_at"], seconds
        )

    def accept(self, job: ProbeJob) -> ProbeJob:
        """Make a succeeded job's result the accepted baseline (gauge + history); ``ValueError`` for a
        job that did not succeed."""
        if job.status is not JobStatus.SUCCEEDED or job.result is None:
            raise ValueError(
                f"probe job {job.id} is {job.status.value}; only a succeeded job can be accepted"
            )
        job.accepted_at = time.time()
        p = job.params
        self.gauges.accept(job.kind, p["model"], p.get("rerank") or None, job.result)
        if self.history is not None:
            self.history.append(
                {
                    "event": "accepted",
                    "id": job.id,
                    "kind": job.kind,
                    "params": dict(p),
                    "result": job.result,
                    "accepted_at": job.accepted_at,
                }
            )
        return job

    def restore(self) -> int:
        """Gauges and finished jobs from the history file; the number of records restored."""
        if self.history is None:
            return 0
        restored = 0
        for record in self.history.latest():
            try:
                job = ProbeJob(str(record["id"]), str(record["kind"]), dict(record["params"]))
                job.status, job.result = JobStatus.SUCCEEDED, dict(record["result"])
                job.created_at = float(record["created_at"])
                job.started_at, job.finished_at = float(record["started_at"]), float(record["finished_at"])
                job.progress.done = job.progress.total = int(record.get("progress", {}).get("total", 0))
                job.progress.timings_s.update(record.get("timings_s", {}))
                self._gauge(record, job.finished_at - job.started_at)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("probe history record skipped: %s", exc)
                continue
            self.jobs.restore(job)
            restored += 1
        for record in self.history.latest("accepted"):
            try:
                p = record["params"]
                self.gauges.accept(str(record["kind"]), p["model"], p.get("rerank") or None, record["result"])
            except (KeyError, TypeError, AttributeError) as exc:
                log.warning("probe acceptance record skipped: %s", exc)
                continue
            accepted = self.jobs.get(str(record.get("id")))
            if accepted is not None:
                accepted.accepted_at = float(record.get("accepted_at") or 0.0) or None
        return restored

    # -- the schedule -------------------------------------------------------------------------------

    def start_schedule(self, engine_ready: Callable[[], CaptionEngine | None]) -> None:
        if self.schedule is not None and self._schedule_task is None:
            self._schedule_task = asyncio.create_task(self._scheduled(engine_ready), name="probe-schedule")

    async def _scheduled(self, engine_ready: Callable[[], CaptionEngine | None]) -> None:
        assert self.schedule is not None
        while (engine := engine_ready()) is None:
            await asyncio.sleep(0.5)
        while True:
            began = time.monotonic()
            for model, ranker in self.schedule.runs:
                for kind in self.schedule.kinds:
                    await self._one_scheduled(engine, kind, model, ranker)
            await asyncio.sleep(max(self.schedule.interval_s - (time.monotonic() - began), 0.0))

    async def _one_scheduled(
        self, engine: CaptionEngine, kind: str, model: str | None, ranker: str | None
    ) -> None:
        assert self.schedule is not None
        try:
            spec = self.spec(
                engine, kind, self.schedule.search(model, ranker), images=self.schedule.images, scheduled=True
            )
        except (RequestError, ValueError) as exc:
            log.warning("scheduled %s probe of %s skipped: %s", kind, model or "the default captioner", exc)
            return
        job = self.start(engine, spec, force=True)
        if job.task is not None:
            await asyncio.gather(job.task, return_exceptions=True)
        if job.status is not JobStatus.SUCCEEDED:
            log.warning("scheduled probe %s ended %s: %s", job.id, job.status.value, job.error)

    async def close(self) -> None:
        if self._schedule_task is not None:
            self._schedule_task.cancel()
            await asyncio.gather(self._schedule_task, return_exceptions=True)
        await self.jobs.close()
        self.parser.close()


__all__ = ["ProbeService"]
