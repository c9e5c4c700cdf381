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
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tiny_repo: Path, tmp_path: Path) -> Iterator[str]:
    """The base URL of a ready ``compcap serve`` on ``tiny_repo``."""
    port = free_port()
    log = (tmp_path / "serve.log").open("w+b")
    env = {**os.environ, "COMPCAP_INTRA_OP_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"server exited with {proc.returncode}:\n{log.read().decode()}")
            try:
                if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                raise AssertionError(f"server not ready in 60 s:\n{log.read().decode()}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
