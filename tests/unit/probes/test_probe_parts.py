"""The probe service's small parts: the schedule format, the job manager (bounded, cancellable, kept in
the shared state), the gauges and the API-key check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError
from starlette.requests import Request

from service.api.auth import check_key
from service.api.errors import ApiError
from service.api.gate import BusyError
from service.probes.feature import probe_schedule
from service.probes.jobs.gauges import ProbeGauges
from service.probes.jobs.manager import JobManager, JobStatus, ProbeJob
from service.probes.jobs.probe_store import ProbeStore
from service.probes.jobs.schedule import parse_duration, parse_schedule
from service.settings import Settings
from service.state.store import open_store


def test_schedule_parses_and_names_the_bad_field() -> None:
    s = parse_schedule("every=15m; kinds=systematicity,substitutivity; models=butr+butr,butd; images=20")
    assert s.interval_s == 900 and s.kinds == ("systematicity", "substitutivity")
    assert s.runs == (("butr", "butr"), ("butd", None)) and s.images == 20
    assert s.search("butr", "butr") == {"model": "butr", "rerank": "butr", "beam_size": 100, "n_best": 5}
    assert s.search("butd", None) == {"model": "butd", "rerank": False, "beam_size": 5, "n_best": 5}
    assert parse_schedule("every=90").runs == ((None, None),) and parse_duration("1h") == 3600
    for text, field in [
        ("kinds=productivity", "every"),
        ("every=soon", "every"),
        ("every=1s", "every"),
        ("every=1m;kinds=grammar", "kinds"),
        ("every=1m;images=0", "images"),
        ("every=1m;colour=red", "colour"),
    ]:
        with pytest.raises(ValueError, match=field):
            parse_schedule(text)


def test_settings_reject_a_bad_schedule_and_short_keys(tmp_path: Path) -> None:
    """The probes feature parses its schedule (at install); ``settings`` keeps the text."""
    (tmp_path / "manifest.json").write_text("{}")
    settings = Settings(repo=tmp_path, probe_schedule="every=never")
    with pytest.raises(ValidationError, match=r"probe_schedule\n  Value error, every: 'never'"):
        probe_schedule(settings)
    assert probe_schedule(Settings(repo=tmp_path, probe_schedule=" ")) is None
    schedule = probe_schedule(Settings(repo=tmp_path, probe_schedule="every=1h"))
    assert schedule is not None and schedule.interval_s == 3600
    with pytest.raises(ValueError, match="api_keys"):
        Settings(repo=tmp_path, api_keys="short")
    s = Settings(repo=tmp_path, api_keys="key-one-1234,key-two-5678")
    assert s.api_key_set() == {"key-one-1234", "key-two-5678"}
    assert "key-one" not in repr(s) and "key-one" not in str(s.model_dump())


class Spec:
    """The two things ``JobManager.submit`` reads of a ``ProbeSpec``."""

    kind = "systematicity"

    def to_dict(self) -> dict[str, Any]:
        return {"model": "butd", "rerank": False, "probe_set": "systematicity"}


async def until(condition: Callable[[], bool], limit_s: float = 30.0) -> None:
    """Yield to the loop until ``condition()`` holds: a job's first step waits on the store's thread,
    which a busy machine may run late (no fixed sleep is long enough everywhere)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.005)


def test_job_manager_bounds_runs_cancels_and_records() -> None:
    recorded: list[str] = []

    async def run() -> None:
        store = ProbeStore(open_store(""))
        jobs = JobManager(max_jobs=2, store=store, keep=3, on_success=lambda j: recorded.append(j.id))
        gate = asyncio.Event()

        async def slow(job: ProbeJob) -> dict[str, Any]:
            job.progress.total = 10
            await gate.wait()
            job.progress.advance(10)
            return {"ok": True}

        async def broken(job: ProbeJob) -> dict[str, Any]:
            raise RuntimeError("the probe set is gone")

        a = await jobs.submit(Spec(), slow)  # type: ignore[arg-type]
        b = await jobs.submit(Spec(), slow)  # type: ignore[arg-type]
        with pytest.raises(BusyError) as full:
            await jobs.submit(Spec(), slow)  # type: ignore[arg-type]
        assert 1 <= full.value.retry_after_s <= 300 and full.value.code == "too_many_probes"
        assert full.value.headers == {"Retry-After": str(round(full.value.retry_after_s))}
        forced = await jobs.submit(Spec(), broken, force=True)  # type: ignore[arg-type]
        await until(lambda: a.progress.total == 10)  # its start is written through the store's thread
        assert a.status is JobStatus.RUNNING and a.view()["progress"] == {"done": 0, "total": 10}
        cancelled = await jobs.cancel(b.id)
        assert cancelled is b and b.status is JobStatus.CANCELLED and "cancelled" in (b.error or "")
        gate.set()
        await asyncio.gather(*(j.task for j in (a, forced) if j.task is not None))
        assert a.status is JobStatus.SUCCEEDED and a.view()["result"] == {"ok": True}
        assert forced.status is JobStatus.FAILED and "the probe set is gone" in (forced.error or "")
        assert recorded == [a.id]
        assert (await jobs.recent())[0].id == forced.id  # newest first
        stored = store.get(forced.id)  # another replica reads the same
        assert stored is not None and stored.status is JobStatus.FAILED and stored.error == forced.error
        gate = asyncio.Event()  # a new gate: c runs until the manager closes
        c = await jobs.submit(Spec(), slow)  # type: ignore[arg-type]
        listed = await jobs.recent()
        assert len(listed) == 3 and c in listed  # keep=3: the newest three are listed
        await until(lambda: c.progress.total == 10)
        assert c.status is JobStatus.RUNNING
        await jobs.close()
        assert c.status is JobStatus.CANCELLED
        d = await jobs.submit(Spec(), slow)  # type: ignore[arg-type]
        await jobs.close()  # before its task ever ran
        assert d.status is JobStatus.CANCELLED and d.finished_at is not None
        await asyncio.sleep(0)  # the tasks' done callbacks
        assert jobs.gate.held == 0  # every job gave its place back, the one that never ran too

    asyncio.run(run())


def test_gauges_expose_the_last_result() -> None:
    registry = CollectorRegistry()
    gauges = ProbeGauges(registry)
    result = {
        "pairs": [
            {
                "pair": "black cat",
                "category": "colour_animate",
                "held_out": True,
                "recall": {"1": 0.25, "5": 0.5},
                "false_composition": {"1": 0.1, "5": 0.2},
            }
        ],
        "held_out": {"recall": {"1": 0.25, "5": 0.5}},
        "seen": {"recall": {"1": None, "5": None}},
    }
    gauges.record("systematicity", "butr", "butr", result, 1700000000.0, 12.5)
    gauges.record("substitutivity", "butd", None, {"rows": {"O vs S": {"bleu4": 0.7}}}, 1700000001.0, 3.0)
    text = generate_latest(registry).decode()
    assert (
        'compcap_probe_recall_at_k{category="colour_animate",held_out="true",k="5",model="butr",'
        'pair="black cat",ranker="butr"} 0.5' in text
    )
    assert 'compcap_probe_false_composition{model="butr",pair="black cat",ranker="butr"} 0.1' in text
    assert 'compcap_probe_substitution_bleu4{model="butd",ranker="none"} 0.7' in text
    assert 'compcap_probe_last_success_timestamp_seconds{kind="systematicity",model="butr"} 1.7e+09' in text
    assert 'compcap_probe_duration_seconds{kind="substitutivity",model="butd"} 3.0' in text
    assert 'held_out="false"' not in text  # no seen pair had a value


def request_with(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw})


def test_api_key_check() -> None:
    keys = frozenset({"secret-key-1"})
    check_key(frozenset(), request_with({}))  # no keys configured: open
    check_key(keys, request_with({"Authorization": "Bearer secret-key-1"}))
    for headers, status in [
        ({}, 401),
        ({"Authorization": "Basic abc"}, 401),
        ({"Authorization": "Bearer "}, 401),
        ({"Authorization": "Bearer secret-key-2"}, 403),
    ]:
        with pytest.raises(ApiError) as err:
            check_key(keys, request_with(headers))
        assert err.value.status == status and "secret-key-1" not in err.value.message
        assert (err.value.headers.get("WWW-Authenticate") == "Bearer") == (status == 401)
