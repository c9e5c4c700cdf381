"""Triton behind many pods: one real ``compcap serve`` (backend=triton) and two real local tritonservers,
A on 127.0.0.1:P and B on 127.0.0.2:P, behind ONE made-up name that only the gateway resolves (a private
mount namespace binds a temporary hosts file over /etc/hosts for the gateway process alone). B joins when
the name starts listing it; under 32 concurrent clients each server gets at least 30% of the model calls
(Triton's own ``nv_inference_request_success``); A is SIGKILLed mid-load and no request is lost or passes
its deadline. A server of other models (another ONNX file, by sha256) gets no calls. Every process is
always stopped; traffic goes to 127.x addresses only."""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from service.backends.base import BackendError
from service.backends.triton.backend import TritonBackend
from service.manifest import load_manifest
from service.metrics import Metrics
from service.tritonlocal.server import LocalTriton, TritonInstall
from tests.integration.conftest import ROOT, free_port, serving

pytestmark = pytest.mark.integration

NAME = "tritons.compcap.test"
HOSTS = ("127.0.0.1", "127.0.0.2")
CLIENTS = 32
MIN_SHARE = 0.30
MAX_REQUESTS = 3000  # per phase, whatever the machine's speed
SPREAD_S = 6.0  # phase 1: load while both serve
KILL_AFTER = 150  # phase 2: responses before A is killed
AFTER_KILL_S = 4.0  # phase 2: load after the kill


def require_triton_venv() -> None:
    try:
        TritonInstall.find()
    except FileNotFoundError as exc:
        pytest.skip(f"{exc} (`make test` creates it)")


def common_port() -> int:
    """A port free on both loopback addresses (each server binds its own address)."""
    for _ in range(20):
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOSTS[1], port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free on both 127.0.0.1 and 127.0.0.2")


@pytest.fixture(scope="module")
def servers(tiny_repo: Path) -> Iterator[tuple[LocalTriton, LocalTriton]]:
    require_triton_venv()
    port = common_port()
    pair = [LocalTriton(tiny_repo, host=host, grpc_port=port) for host in HOSTS]
    try:
        for server in pair:
            server.start()
        for server in pair:
            server.wait_ready(timeout=120)
        yield pair[0], pair[1]
    finally:
        for server in pair:
            server.stop()


def private_hosts_works(hosts: Path) -> bool:
    """Whether ``unshare --mount`` + ``mount --bind`` over /etc/hosts works here (root, mount namespaces)."""
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {NAME}\n", encoding="utf-8")
    if shutil.which("unshare") is None:
        return False
    probe = [
        "unshare",
        "--mount",
        "sh",
        "-c",
        f'mount --bind "$0" /etc/hosts && getent hosts {NAME}',
        str(hosts),
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "127.0.0.1" in done.stdout


def triton_calls(server: LocalTriton) -> int:
    """Model calls the server answered: ``nv_inference_request_success`` summed over its models."""
    text = httpx.get(server.metrics_url, timeout=5, trust_env=False).text
    return sum(int(float(n)) for n in re.findall(r"^nv_inference_request_success\{[^}]*\} (\S+)", text, re.M))


def gateway_addresses(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=5, trust_env=False).text
    return {
        s: float(v) for s, v in re.findall(r'^compcap_triton_addresses\{state="(\w+)"\} (\S+)', text, re.M)
    }


def gateway_counter(url: str, name: str) -> float:
    """A gateway counter summed over its labels (0 when it has no sample yet)."""
    text = httpx.get(f"{url}/metrics", timeout=5, trust_env=False).text
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)", text, re.M))


def wait_for_addresses(url: str, healthy: int, timeout_s: float = 60.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        states = gateway_addresses(url)
        if states.get("healthy") == healthy:
            return states
        assert time.monotonic() < deadline, f"not {healthy} healthy addresses: {states}"
        time.sleep(0.1)


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    past_deadline: int = 0
    seconds: float = 0.0

    @property
    def requests(self) -> int:
        return len(self.latencies) + len(self.failures)

    def figures(self) -> str:
        ms = np.percentile(self.latencies, [50, 99]) * 1000 if self.latencies else [float("nan")] * 2
        return (
            f"{self.requests} requests in {self.seconds:.1f} s, {len(self.failures)} failed, "
            f"{self.past_deadline} past the deadline, p50 {ms[0]:.0f} ms, p99 {ms[1]:.0f} ms"
        )


def png(seed: int, size: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


async def load(
    url: str, seconds: float, deadline_s: float, images: list[bytes], kill: LocalTriton | None
) -> Load:
    """``CLIENTS`` clients captioning one image at a time for ``seconds`` (at most ``MAX_REQUESTS``);
    with ``kill``, that server's process group is SIGKILLed once ``KILL_AFTER`` responses came back and
    the load goes on ``AFTER_KILL_S`` from then."""
    result = Load()
    enough = asyncio.Event()
    start = time.monotonic()
    stop_at = start + seconds

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal stop_at
        n = 0
        while time.monotonic() < stop_at and result.requests < MAX_REQUESTS:
            image = images[(index + n) % len(images)]
            n += 1
            began = time.monotonic()
            try:
                response = await http.post("/v1/captions", files={"image": ("i.png", image, "image/png")})
            except httpx.HTTPError as exc:
                result.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            took = time.monotonic() - began
            if response.status_code == 504 or took > deadline_s:
                result.past_deadline += 1
            if response.status_code == 200:
                result.latencies.append(took)
            else:
                result.failures.append(f"{response.status_code}: {response.text[:200]}")
            if result.requests >= KILL_AFTER:
                enough.set()

    async def killer() -> None:
        nonlocal stop_at
        assert kill is not None and kill.process is not None
        await enough.wait()
        os.killpg(kill.process.pid, signal.SIGKILL)
        stop_at = time.monotonic() + AFTER_KILL_S

    async with httpx.AsyncClient(base_url=url, timeout=60.0, trust_env=False) as http:
        tasks = [asyncio.create_task(client(i, http)) for i in range(CLIENTS)]
        if kill is not None:
            stop_at = start + 120.0  # until the kill, then AFTER_KILL_S
            tasks.append(asyncio.create_task(killer()))
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=180)
    result.seconds = time.monotonic() - start
    return result


def test_one_name_two_servers_spread_and_a_killed_server_loses_nothing(
    servers: tuple[LocalTriton, LocalTriton], tiny_repo: Path, tmp_path: Path
) -> None:
    a, b = servers
    port = a.grpc_port
    hosts = tmp_path / "hosts"
    one_name = private_hosts_works(hosts)
    if one_name:  # the name lists A only at first: B joins when the name lists it too
        triton_url = f"dns:///{NAME}:{port}"
        shell = 'mount --bind "$0" /etc/hosts && exec "$@"'
        prefix = ["unshare", "--mount", "sh", "-c", shell, str(hosts)]
    else:
        print("\nno private mount namespace here: the gateway gets the comma-separated list instead")
        triton_url, prefix = f"{a.grpc_url},{b.grpc_url}", []
    gateway_port = free_port()
    deadline_s = 10.0
    env = {
        **os.environ,
        "COMPCAP_BACKEND": "triton",
        "COMPCAP_TRITON_URL": triton_url,
        "COMPCAP_TRITON_RESOLVE_S": "0.5",
        "COMPCAP_TRITON_STARTUP_S": "60",
        "COMPCAP_REQUEST_DEADLINE_S": str(deadline_s),
        "COMPCAP_FEATURES": "",
        "COMPCAP_LOG_FORMAT": "text",
    }
    serve = [
        sys.executable,
        "-m",
        "service.cli",
        "serve",
        "--port",
        str(gateway_port),
        "--repo",
        str(tiny_repo),
    ]
    images = [png(seed, 96) for seed in range(8)]
    with serving([*prefix, *serve], env, gateway_port, tmp_path / "serve.log", cwd=ROOT) as url:
        if one_name:
            assert wait_for_addresses(url, healthy=1)["healthy"] == 1
            with hosts.open("a", encoding="utf-8") as file:  # the same inode: the bind mount sees it
                file.write(f"127.0.0.2 {NAME}\n")
        wait_for_addresses(url, healthy=2)

        before = [triton_calls(a), triton_calls(b)]
        spread = asyncio.run(load(url, SPREAD_S, deadline_s, images, kill=None))
        calls = [triton_calls(a) - before[0], triton_calls(b) - before[1]]
        shares = [c / max(sum(calls), 1) for c in calls]
        print(
            f"\nspread ({triton_url}): {spread.figures()}; model calls A {calls[0]} ({shares[0]:.1%}), "
            f"B {calls[1]} ({shares[1]:.1%})"
        )
        assert not spread.failures and spread.past_deadline == 0, spread.failures[:5]
        assert min(shares) >= MIN_SHARE, calls

        b_before = triton_calls(b)
        killed = asyncio.run(load(url, 0.0, deadline_s, images, kill=a))
        b_after = triton_calls(b) - b_before
        states = gateway_addresses(url)
        print(f"A killed after {KILL_AFTER} responses: {killed.figures()}; B answered {b_after} model calls")
        retried = gateway_counter(url, "compcap_triton_retries_total")
        print(f"gateway addresses after the kill: {states}; model calls retried on B: {retried:.0f}")
        assert not killed.failures, killed.failures[:5]
        assert killed.past_deadline == 0
        assert states.get("ejected") == 1 and states.get("healthy") == 1, states
        log = (tmp_path / "serve.log").read_text(encoding="utf-8")
        assert f"triton address {a.grpc_url} ejected" in log, log[-3000:]


def test_a_server_of_other_models_gets_no_calls(
    servers: tuple[LocalTriton, LocalTriton], tiny_repo: Path, tmp_path: Path
) -> None:
    """The gateway's repository has another visual_encoder (one byte more): B, serving the tiny
    repository's, publishes a sha256 that is not the repository's."""
    _, b = servers  # B: A may have been killed already
    manifest = load_manifest(tiny_repo)
    other = tmp_path / "other"
    for entry in manifest.models:
        path = entry.path(other)
        path.parent.mkdir(parents=True)
        path.write_bytes(
            entry.path(tiny_repo).read_bytes() + (b"\0" if entry.name == "visual_encoder" else b"")
        )

    async def run() -> tuple[BackendError, BackendError, str]:
        with pytest.raises(BackendError) as single:  # one address: refused at once, as before
            await TritonBackend.connect(b.grpc_url, manifest, timeout_s=60, repo=other)
        metrics = Metrics()
        nobody = f"127.0.0.3:{free_port()}"  # nobody listens there
        started = time.monotonic()
        with pytest.raises(BackendError) as several:  # several: wait for one that matches, bounded
            await TritonBackend.connect(
                f"{b.grpc_url},{nobody}", manifest, metrics, timeout_s=1.0, repo=other
            )
        assert time.monotonic() - started < 30
        backend = await TritonBackend.connect(
            f"{b.grpc_url},{nobody}", manifest, Metrics(), 30, repo=tiny_repo
        )
        try:
            images = np.zeros((2, *manifest.model("visual_encoder").inputs[0].dims), dtype=np.uint8)
            assert (await backend.infer("visual_encoder", {"image": images}))["regions"].shape[0] == 2
        finally:
            await backend.close()
        return single.value, several.value, metrics.exposition().decode()

    single, several, text = asyncio.run(run())
    for refused in (single, several):
        assert refused.reason == "runtime"
        assert "visual_encoder: compcap_model_sha256" in str(refused) and "mismatched" in str(refused)
    assert 'compcap_triton_addresses{state="mismatched"} 1.0' in text


def test_no_server_left_answers_503_with_retry_after(
    servers: tuple[LocalTriton, LocalTriton], tiny_repo: Path, tmp_path: Path
) -> None:
    """The last test of the module: B goes away too. A caption then gets a 503 naming the backend, with
    Retry-After, within its deadline — not a 502, not a hang — and the gateway keeps answering."""
    _, b = servers
    assert b.process is not None
    port = free_port()
    env = {
        **os.environ,
        "COMPCAP_BACKEND": "triton",
        "COMPCAP_TRITON_URL": b.grpc_url,
        "COMPCAP_REQUEST_DEADLINE_S": "10",
        "COMPCAP_FEATURES": "",
    }
    serve = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    image = png(0, 96)
    with serving(serve, env, port, tmp_path / "serve.log", cwd=ROOT) as url:
        ok = httpx.post(f"{url}/v1/captions", files={"image": ("i.png", image, "image/png")}, timeout=30)
        assert ok.status_code == 200, ok.text
        os.killpg(b.process.pid, signal.SIGKILL)
        b.process.wait(timeout=30)
        began = time.monotonic()
        gone = httpx.post(f"{url}/v1/captions", files={"image": ("i.png", image, "image/png")}, timeout=30)
        took = time.monotonic() - began
        assert gone.status_code == 503, gone.text
        assert gone.json()["error"]["code"] == "backend_unavailable" and gone.headers["Retry-After"] == "1"
        assert took < 10.0, took
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
