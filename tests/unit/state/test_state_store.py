"""The shared state on one SQLite file opened by two stores, as two replicas on one host do: versioned
migrations, the lease, probe jobs any replica reads, cancels and accepts, the sweep of a dead replica's
jobs, and the stored shadow reservoir against the in-memory one. (PostgreSQL: the integration tier.)"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from service.compare.reservoir import DiscrepancyReservoir, ReservoirItem
from service.compare.stored import StoredReservoir
from service.probes.jobs.manager import JobManager, JobStatus, ProbeJob
from service.probes.jobs.probe_store import ProbeStore
from service.settings import Settings
from service.state.lease import Lease
from service.state.migrations import MIGRATIONS, SchemaTooNew
from service.state.schema import schema_version
from service.state.store import StateStore, open_store


class Spec:
    kind = "systematicity"

    def __init__(self, model: str = "butd") -> None:
        self.model = model

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "rerank": False, "probe_set": "systematicity"}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


def test_migrations_apply_once_and_a_newer_store_is_refused(url: str) -> None:
    first, second = open_store(url, "a"), open_store(url, "b")
    assert first.migrated == [m.version for m in MIGRATIONS] and second.migrated == []
    with first.begin() as conn:
        conn.execute(sa.insert(schema_version).values(version=999, description="future", applied_at=0.0))
    with pytest.raises(SchemaTooNew, match="schema version 999"):
        open_store(url, "c")


def test_settings_name_a_bad_state_url_and_a_stale_time_below_two_heartbeats() -> None:
    with pytest.raises(ValueError, match="state_url"):
        Settings(state_url="mysql://db/compcap")
    with pytest.raises(ValueError, match="psycopg"):
        Settings(state_url="postgresql+asyncpg://db/compcap")
    with pytest.raises(ValueError, match="state_stale_s"):
        Settings(state_heartbeat_s=5, state_stale_s=9)
    assert Settings(state_url="").state_url == ""


def test_the_lease_has_one_holder_until_it_expires_or_is_released(url: str) -> None:
    a, b = Lease(open_store(url, "a"), "schedule", 0.5), Lease(open_store(url, "b"), "schedule", 0.5)
    assert a.try_acquire() and not b.try_acquire() and a.try_acquire()  # a renews; b waits
    assert a.set_data({"next_due": 42.0}) and not b.set_data({"next_due": 0.0})
    assert b.data() == {"next_due": 42.0}
    held = a.holder()
    assert held is not None and held[0] == "a"
    time.sleep(0.6)  # a stopped renewing (it died): the lease expires
    assert b.try_acquire() and not a.try_acquire() and not a.set_data({})
    b.release()  # a clean shutdown hands it over at once
    assert a.try_acquire()


def test_any_replica_reads_cancels_and_accepts_and_a_dead_ones_jobs_fail(url: str) -> None:
    a, b = ProbeStore(open_store(url, "replica-a")), ProbeStore(open_store(url, "replica-b"))
    job = ProbeJob("p1", "systematicity", Spec().to_dict(), replica="replica-a")
    job.status, job.started_at = JobStatus.RUNNING, time.time()
    a.insert(job)
    job.progress.total, job.progress.done, job.progress.partial = 10, 4, {"so": "far"}
    assert a.heartbeat([job]) == set()
    seen = b.get("p1")
    assert seen is not None and seen.replica == "replica-a" and seen.progress.done == 4
    assert seen.progress.partial == {"so": "far"} and seen.status is JobStatus.RUNNING
    b.request_cancel("p1", stale_s=30.0)  # a is alive: it is asked, and cancels at its heartbeat
    assert a.heartbeat([job]) == {"p1"}
    still = b.get("p1")
    assert still is not None and still.status is JobStatus.RUNNING and still.cancel_requested

    done = ProbeJob("p2", "systematicity", Spec().to_dict(), replica="replica-a")
    done.status, done.result, done.finished_at = JobStatus.SUCCEEDED, {"recall": 0.5}, time.time()
    done.started_at = done.finished_at - 1.0
    a.insert(done)
    a.finish(done)
    read = b.get("p2")
    assert read is not None
    b.accept(read, accepted_at=123.0)
    assert [r["job_id"] for r in a.baselines()] == ["p2"] and a.baselines()[0]["result"] == {"recall": 0.5}
    assert [j.id for j in a.latest()] == ["p2"]
    accepted = a.get("p2")
    assert accepted is not None and accepted.accepted_at == 123.0

    assert b.sweep(stale_s=30.0) == []  # p1's runner wrote a moment ago
    time.sleep(0.3)
    assert b.sweep(stale_s=0.2) == ["p1"]  # then a died
    failed = b.get("p1")
    assert failed is not None and failed.status is JobStatus.FAILED
    assert failed.error is not None and "replica replica-a stopped running this job" in failed.error
    assert [j.id for j in b.recent(10)] == ["p2", "p1"]  # newest first (by creation)


def test_a_cancel_asked_on_one_replica_stops_the_job_on_the_other(url: str) -> None:
    async def run() -> None:
        a = JobManager(1, ProbeStore(open_store(url, "a")), heartbeat_s=0.05, stale_s=5.0)
        b = JobManager(1, ProbeStore(open_store(url, "b")), heartbeat_s=0.05, stale_s=5.0)
        a.start()
        b.start()
        started = asyncio.Event()

        async def forever(job: ProbeJob) -> dict[str, Any]:
            job.progress.total = 3
            started.set()
            await asyncio.Event().wait()
            return {}

        job = await a.submit(Spec(), forever)  # type: ignore[arg-type]
        await started.wait()
        seen = await b.get(job.id)
        assert seen is not None and seen.status is JobStatus.RUNNING and seen.replica == "a"
        cancelled = await b.cancel(job.id)
        assert cancelled is not None and cancelled.status is JobStatus.CANCELLED
        assert job.status is JobStatus.CANCELLED  # the task on a was cancelled
        assert job.task is not None
        await asyncio.gather(job.task, return_exceptions=True)  # its done callbacks (the release) ran
        assert a.gate.held == 0
        await a.close()
        await b.close()

    asyncio.run(run())


def test_the_stored_reservoir_keeps_what_the_in_memory_one_keeps(url: str) -> None:
    rng = random.Random(7)
    memory = DiscrepancyReservoir(capacity=5, max_bytes=400)
    stored = StoredReservoir(open_store(url, "a"), "shadow", capacity=5, max_bytes=400)
    other = StoredReservoir(open_store(url, "b"), "shadow", capacity=5, max_bytes=400)
    for n in range(60):
        item = ReservoirItem(
            round(rng.random(), 2), round(rng.random(), 1), {"n": n}, rng.choice([10, 50, 120, 500])
        )
        assert memory.would_refuse(item.similarity, item.tie_break) == stored.would_refuse(
            item.similarity, item.tie_break
        )
        target = stored if n % 2 else other  # two replicas add to one reservoir
        assert memory.add(item) == target.add(item), n
    mine, theirs = memory.snapshot(), stored.snapshot()
    assert theirs == other.snapshot()
    assert [i["n"] for i in theirs["items"]] == [i["n"] for i in mine["items"]]
    assert (theirs["bytes"], theirs["seen"], theirs["refused"]) == (
        mine["bytes"],
        mine["seen"],
        mine["refused"],
    )


def test_an_in_memory_store_is_this_process_only() -> None:
    store = StateStore("")
    assert not store.shared and store.shown_url == "sqlite:// (in memory)" and store.migrated is None
    assert Lease(store, "x", 1.0).try_acquire() and store.migrated == [m.version for m in MIGRATIONS]
