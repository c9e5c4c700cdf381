"""``ProbeStore``: the probe jobs, their progress and the accepted baselines in the shared state
(``service.state``), so that any replica answers for any job. Blocking calls: ``JobManager`` and
``ProbeService`` run them through ``StateStore.call``.

A running job's row is written by the replica that runs it (its ``replica``): at start, then every
heartbeat (progress, partial result, ``heartbeat_at``), then once when it ends. Another replica asks
for a cancel by setting ``cancel_requested``, which the runner reads at its next heartbeat. A job
whose runner stopped writing for ``stale_s`` (the replica died, or lost the database) is marked
failed with that reason by the first replica that sweeps: it is not run again, since a probe is
cheap to restart and a half-decoded one cannot be resumed."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from service.probes.jobs.manager import CANCELLED, JobStatus, ProbeJob
from service.state.schema import probe_baselines, probe_jobs
from service.state.store import StateStore

UNFINISHED = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)


def _key(params: dict[str, Any]) -> dict[str, str]:
    return {
        "model": str(params.get("model") or ""),
        "ranker": str(params.get("rerank") or ""),
        "probe_set": str(params.get("probe_set") or ""),
    }


def to_row(job: ProbeJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        **_key(job.params),
        "params": job.params,
        "scheduled": job.scheduled,
        "status": job.status.value,
        "error": job.error,
        "done": job.progress.done,
        "total": job.progress.total,
        "timings": dict(job.progress.timings_s),
        "partial": job.progress.partial if not job.status.terminal else None,
        "result": job.result,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "accepted_at": job.accepted_at,
        "replica": job.replica,
        "heartbeat_at": time.time(),
        "cancel_requested": job.cancel_requested,
    }


def from_row(row: sa.RowMapping) -> ProbeJob:
    job = ProbeJob(str(row["id"]), str(row["kind"]), dict(row["params"]))
    job.status, job.error = JobStatus(row["status"]), row["error"]
    job.progress.done, job.progress.total = int(row["done"]), int(row["total"])
    job.progress.timings_s.update(row["timings"] or {})
    job.progress.partial = row.get("partial")
    job.result = row.get("result")
    job.created_at, job.started_at = float(row["created_at"]), row["started_at"]
    job.finished_at, job.accepted_at = row["finished_at"], row["accepted_at"]
    job.replica, job.scheduled = str(row["replica"]), bool(row["scheduled"])
    job.cancel_requested = bool(row["cancel_requested"])
    return job


class ProbeStore:
    def __init__(self, store: StateStore) -> None:
        self.store = store

    @property
    def replica(self) -> str:
        return self.store.replica

    def insert(self, job: ProbeJob) -> None:
        with self.store.begin() as conn:
            conn.execute(sa.insert(probe_jobs).values(**to_row(job)))

    def heartbeat(self, jobs: list[ProbeJob]) -> set[str]:
        """Write the progress of this replica's unfinished ``jobs``; the ids of those another replica
        asked to cancel. A row already marked finished (swept while this replica stalled) is left be."""
        if not jobs:
            return set()
        now = time.time()
        with self.store.begin() as conn:
            for job in jobs:
                conn.execute(
                    sa.update(probe_jobs)
                    .where(probe_jobs.c.id == job.id, probe_jobs.c.status.in_(UNFINISHED))
                    .values(
                        status=job.status.value,
                        done=job.progress.done,
                        total=job.progress.total,
                        partial=job.progress.partial,
                        timings=dict(job.progress.timings_s),
                        started_at=job.started_at,
                        heartbeat_at=now,
                    )
                )
            asked = conn.scalars(
                sa.select(probe_jobs.c.id).where(
                    probe_jobs.c.id.in_([j.id for j in jobs]), probe_jobs.c.cancel_requested
                )
            )
            return set(asked)

    def finish(self, job: ProbeJob) -> None:
        """The job's final state (overwrites a sweep's verdict: the runner knows best)."""
        row = to_row(job)
        with self.store.begin() as conn:
            conn.execute(sa.update(probe_jobs).where(probe_jobs.c.id == job.id).values(**row))

    def get(self, job_id: str) -> ProbeJob | None:
        with self.store.begin() as conn:
            row = conn.execute(sa.select(probe_jobs).where(probe_jobs.c.id == job_id)).mappings().first()
        return None if row is None else from_row(row)

    def recent(self, limit: int) -> list[ProbeJob]:
        """The newest ``limit`` jobs of every replica (with their results: a listing shows each one's
        summary)."""
        with self.store.begin() as conn:
            rows = conn.execute(
                sa.select(probe_jobs).order_by(probe_jobs.c.created_at.desc()).limit(limit)
            ).mappings()
            return [from_row(r) for r in rows]

    def request_cancel(self, job_id: str, stale_s: float) -> None:
        """Ask the job's runner to cancel it; a job whose runner is gone is cancelled here and now."""
        now = time.time()
        unfinished = sa.and_(probe_jobs.c.id == job_id, probe_jobs.c.status.in_(UNFINISHED))
        with self.store.begin() as conn:
            conn.execute(sa.update(probe_jobs).where(unfinished).values(cancel_requested=True))
            conn.execute(
                sa.update(probe_jobs)
                .where(unfinished, probe_jobs.c.heartbeat_at < now - stale_s)
                .values(status=JobStatus.CANCELLED.value, error=CANCELLED, finished_at=now, partial=None)
            )

    def sweep(self, stale_s: float) -> list[str]:
        """Mark failed the unfinished jobs whose runner stopped writing ``stale_s`` ago; their ids."""
        now = time.time()
        stale = sa.and_(probe_jobs.c.status.in_(UNFINISHED), probe_jobs.c.heartbeat_at < now - stale_s)
        with self.store.begin() as conn:
            rows = conn.execute(
                sa.select(probe_jobs.c.id, probe_jobs.c.replica, probe_jobs.c.heartbeat_at).where(stale)
            ).all()
            for job_id, replica, beat in rows:
                conn.execute(
                    sa.update(probe_jobs)
                    .where(probe_jobs.c.id == job_id, stale)
                    .values(
                        status=JobStatus.FAILED.value,
                        error=f"replica {replica} stopped running this job (no heartbeat for "
                        f"{now - beat:.0f} s: it died or lost the state store); start the probe again",
                        finished_at=now,
                        partial=None,
                    )
                )
        return [str(r[0]) for r in rows]

    def accept(self, job: ProbeJob, accepted_at: float) -> None:
        """Record ``job``'s result as the baseline of its (kind, model, ranker, probe set)."""
        key = {"kind": job.kind, **_key(job.params)}
        insert = pg_insert if self.store.dialect == "postgresql" else sqlite_insert
        values = {"job_id": job.id, "result": job.result, "accepted_at": accepted_at}
        with self.store.begin() as conn:
            conn.execute(
                sa.update(probe_jobs).where(probe_jobs.c.id == job.id).values(accepted_at=accepted_at)
            )
            conn.execute(
                insert(probe_baselines)
                .values(**key, **values)
                .on_conflict_do_update(index_elements=list(key), set_=values)
            )

    def latest(self) -> list[ProbeJob]:
        """The last succeeded job of each (kind, model, ranker, probe set), oldest first."""
        j = probe_jobs.c
        groups = [j.kind, j.model, j.ranker, j.probe_set]
        last = (
            sa.select(*groups, sa.func.max(j.finished_at).label("at"))
            .where(j.status == JobStatus.SUCCEEDED.value)
            .group_by(*groups)
            .subquery()
        )
        joined = sa.and_(*(c == last.c[c.name] for c in groups), j.finished_at == last.c.at)
        with self.store.begin() as conn:
            rows = conn.execute(
                sa.select(probe_jobs)
                .join(last, joined)
                .where(j.status == JobStatus.SUCCEEDED.value)
                .order_by(j.finished_at)
            ).mappings()
            return [from_row(r) for r in rows]

    def baselines(self) -> list[dict[str, Any]]:
        """The accepted baselines, oldest acceptance first."""
        with self.store.begin() as conn:
            rows = conn.execute(sa.select(probe_baselines).order_by(probe_baselines.c.accepted_at)).mappings()
            return [dict(r) for r in rows]


__all__ = ["ProbeStore", "from_row", "to_row"]
