"""Two real ``compcap serve`` replicas sharing one state store — a PostgreSQL server (Debian's, started
here on an ephemeral port) and, separately, one SQLite file on this host:

- a probe started through A is read, cancelled and accepted through B (and A sees the acceptance);
- the scheduled probes run on exactly one of them (the holder of the schedule's lease);
- SIGKILL that one: the other takes the lease and runs the next interval's probe, and the job the dead
  replica left unfinished is marked failed with the reason. The time it took is printed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ROOT, free_port, stop
from tests.integration.postgres_server import local_postgres

pytestmark = pytest.mark.integration

INTERVAL_S, LEASE_S, HEARTBEAT_S, STALE_S = 10.0, 3.0, 0.5, 3.0
SCHEDULE = f"every={INTERVAL_S:.0f}s;kinds=systematicity;models=butd;beam=2"
LEADER = re.compile(r"^compcap_probe_schedule_leader (\S+)$", re.M)


class Replica:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.name, self.proc, self.url, self.log = name, proc, url, log
        self.http = httpx.Client(base_url=url, timeout=30.0, trust_env=False)

    def leader(self) -> bool:
        found = LEADER.search(self.http.get("/metrics").text)
        return found is not None and float(found.group(1)) == 1.0

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.http.get("/v1/probes").json()["jobs"])


@contextmanager
def replica(repo: Path, tmp: Path, name: str, state_url: str) -> Iterator[Replica]:
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(repo)]
    env = {
        **os.environ,
        "COMPCAP_INTRA_OP_THREADS": "1",
        "COMPCAP_REPLICA": name,
        "COMPCAP_STATE_URL": state_url,
        "COMPCAP_STATE_HEARTBEAT_S": str(HEARTBEAT_S),
        "COMPCAP_STATE_STALE_S": str(STALE_S),
        "COMPCAP_STATE_LEASE_S": str(LEASE_S),
        "COMPCAP_PROBE_SCHEDULE": SCHEDULE,
    }
    log = tmp / f"{name}.log"
    with log.open("w+b") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    r = Replica(name, proc, f"http://127.0.0.1:{port}", log)
    try:
        yield r
    finally:
        r.http.close()
        stop(proc, grace_s=15.0)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 120.0, every_s: float = 0.2) -> Any:
    """``check()``'s first truthy answer (bounded only against a hang: the machine's speed varies)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = check()
        except httpx.TransportError:
            answer = None
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


def ready(r: Replica) -> bool:
    if r.proc.poll() is not None:
        raise AssertionError(f"{r.name} exited with {r.proc.returncode}:\n{r.log.read_text()[-4000:]}")
    return r.http.get("/readyz").is_success


def status_of(r: Replica, job_id: str) -> dict[str, Any]:
    response = r.http.get(f"/v1/probes/{job_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


@contextmanager
def store(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "postgresql":
        with local_postgres() as url:
            yield url
    else:
        yield f"sqlite:///{tmp / 'state.db'}"


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_two_replicas_share_jobs_baselines_and_one_schedule(
    tiny_repo: Path, tmp_path: Path, kind: str
) -> None:
    with ExitStack() as stack:
        url = stack.enter_context(store(kind, tmp_path))
        a = stack.enter_context(replica(tiny_repo, tmp_path, "a", url))
        b = stack.enter_context(replica(tiny_repo, tmp_path, "b", url))
        for r in (a, b):
            wait_for(f"{r.name} ready", lambda r=r: ready(r))

        # read, cancel and accept through B what was started through A
        long = a.http.post("/v1/probes", json={"kind": "systematicity", "model": "butd", "beam_size": 12})
        assert long.status_code == 202, long.text
        job_id = long.json()["id"]
        seen = status_of(b, job_id)
        assert seen["replica"] == "a" and seen["status"] in ("queued", "running")
        cancelled = b.http.delete(f"/v1/probes/{job_id}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
        assert status_of(a, job_id)["status"] == "cancelled"
        small = a.http.post(
            "/v1/probes", json={"kind": "systematicity", "model": "butd", "beam_size": 2, "images": 1}
        )
        small_id = small.json()["id"]
        done = wait_for("the small probe", lambda: status_of(b, small_id)["status"] == "succeeded")
        assert done
        accepted = b.http.post(f"/v1/probes/{small_id}/accept")
        assert accepted.status_code == 200 and accepted.json()["accepted_at"], accepted.text
        assert status_of(a, small_id)["accepted_at"] == accepted.json()["accepted_at"]
        # A's gauges take the baseline B accepted (its refresh from the store)
        wait_for(
            "the baseline on A's /metrics",
            lambda: "compcap_probe_accepted_recall_at_k_mean{" in a.http.get("/metrics").text,
            timeout_s=60,
        )

        # exactly one replica runs the schedule
        leaders = wait_for("a schedule leader", lambda: [r for r in (a, b) if r.leader()] or None)
        assert len(leaders) == 1
        leader = leaders[0]
        other = b if leader is a else a
        assert not other.leader()
        first = wait_for(
            "a scheduled probe",
            lambda: [j for j in leader.jobs() if j["scheduled"] and j["status"] == "succeeded"],
        )
        scheduled = [j for j in other.jobs() if j["scheduled"]]
        assert {j["replica"] for j in scheduled} == {leader.name}, scheduled

        # SIGKILL the leader, if it can be caught mid-probe while one of its scheduled probes runs
        wait_for(
            "the leader's next scheduled probe running",
            lambda: any(j["scheduled"] and j["status"] == "running" for j in leader.jobs()),
            timeout_s=3 * INTERVAL_S,
            every_s=0.05,
        )
        killed_at = time.time()
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait(timeout=10)
        taken = wait_for(
            "the other replica's first scheduled probe",
            lambda: [j for j in other.jobs() if j["scheduled"] and j["replica"] == other.name],
            timeout_s=4 * INTERVAL_S,
        )
        took = min(j["created_at"] for j in taken) - killed_at
        orphans = wait_for(
            "the dead replica's unfinished job marked failed",
            lambda: [
                j
                for j in other.jobs()
                if j["replica"] == leader.name and j["scheduled"] and j["status"] == "failed"
            ],
            timeout_s=4 * STALE_S + 10,
        )
        assert any(f"replica {leader.name} stopped running this job" in (j["error"] or "") for j in orphans)
        assert not [
            j for j in other.jobs() if j["status"] in ("queued", "running") and j["replica"] == leader.name
        ]
        assert other.leader()
        print(
            f"\n[{kind}] shared state: first scheduled probe on {leader.name} at "
            f"{first[0]['created_at']:.1f}; after SIGKILL of {leader.name}, {other.name} started the next "
            f"interval's probe {took:.1f} s later (lease {LEASE_S:g} s, interval {INTERVAL_S:g} s); "
            f"{len(orphans)} orphaned job(s) marked failed"
        )
