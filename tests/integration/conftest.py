"""A real ``compcap serve`` process on an OS-assigned 127.0.0.1 port, polled until ready and always
terminated (vLLM ``tests/utils.py`` ``RemoteOpenAIServer``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def find_python(version: str) -> str | None:
    """A CPython ``version`` ("3.13") interpreter that runs, as ``scripts/find_python.sh`` finds it (on PATH,
    else pyenv's): this one when it is that version; ``None`` when there is none."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    script = ROOT / "scripts" / "find_python.sh"
    found = subprocess.run(["bash", str(script), version], capture_output=True, text=True, check=False)
    return found.stdout.strip() or None


def copy_tracked(dest: Path, folders: tuple[str, ...], files: tuple[str, ...] = ()) -> Path:
    """The repository's tracked files under ``folders`` (and ``files``) copied into ``dest``, so that an
    install from there (a wheel build) leaves nothing in the checkout."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if name.startswith(tuple(f"{folder}/" for folder in folders)) or name in files:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((ROOT / name).read_bytes())
    return dest


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(
    cmd: list[str],
    env: dict[str, str],
    port: int,
    log_path: Path,
    path: str = "/readyz",
    cwd: Path = ROOT,
) -> Iterator[str]:
    """Run ``cmd`` (a ``compcap serve``), wait until ``path`` answers 2xx on 127.0.0.1:``port``, yield
    the base URL, and always terminate the process."""
    with serving_process(cmd, env, port, log_path, path, cwd) as (url, _):
        yield url


@contextmanager
def serving_process(
    cmd: list[str],
    env: dict[str, str],
    port: int,
    log_path: Path,
    path: str = "/readyz",
    cwd: Path = ROOT,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``serving``, yielding the process too (a test that signals it)."""
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w+b") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"server exited with {proc.returncode}:\n{log_path.read_text()}")
                try:
                    if httpx.get(f"{url}{path}", timeout=1.0, trust_env=False).is_success:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"server not ready in 60 s:\n{log_path.read_text()}")
                time.sleep(0.1)
            yield url, proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM ``proc`` if it still runs, SIGKILL it after ``grace_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def server(tiny_repo: Path, tmp_path: Path) -> Iterator[str]:
    """The base URL of a ready ``compcap serve`` on ``tiny_repo``."""
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    with serving(cmd, {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1"}, port, tmp_path / "serve.log") as url:
        yield url


@contextmanager
def local_triton(repo: Path) -> Iterator[Any]:
    """A ready local Triton (``service.tritonlocal``) serving ``repo``, always stopped; the test skips
    where its venv is missing (``make test`` creates it)."""
    from service.tritonlocal.server import LocalTriton, TritonInstall

    try:
        TritonInstall.find()
    except FileNotFoundError as exc:
        pytest.skip(f"{exc} (`make test` creates it)")
    server = LocalTriton(repo)
    try:
        server.start()
        server.wait_ready(timeout=120)
        yield server
    finally:
        server.stop()


def triton_metrics(server: Any) -> str:
    """A local Triton's metrics text; a refused connection fails with what the server was doing (its
    process state and log), so that a metrics port that closes under load can be told apart."""
    try:
        return httpx.get(server.metrics_url, timeout=5).text
    except httpx.ConnectError as exc:
        state = "running" if server.process is not None and server.process.poll() is None else "exited"
        raise AssertionError(
            f"Triton's metrics at {server.metrics_url} refused ({exc}); tritonserver {state}; "
            f"HTTP ready: {server.is_ready()}; log tail:\n{server.log_tail()}"
        ) from exc


def triton_successes(server: Any, model: str) -> int:
    """Successful inferences of ``model`` on a Triton server (its metrics)."""
    for line in triton_metrics(server).splitlines():
        if line.startswith("nv_inference_request_success") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0
