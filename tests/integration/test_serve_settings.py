"""``compcap serve`` with no flags takes its address and repository from ``COMPCAP_*`` (as a container
sets them): ``COMPCAP_HOST=0.0.0.0`` must bind every interface, not loopback. Connects only to 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROC_NET_TCP = Path("/proc/net/tcp")
LISTEN = "0A"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening_addresses(port: int) -> list[str]:
    """Local IPv4 addresses (hex, as /proc/net/tcp writes them) of the sockets listening on ``port``."""
    found = []
    for line in PROC_NET_TCP.read_text().splitlines()[1:]:
        fields = line.split()
        address, _, port_hex = fields[1].partition(":")
        if int(port_hex, 16) == port and fields[3] == LISTEN:
            found.append(address)
    return found


def compcap() -> list[str]:
    script = Path(sys.executable).with_name("compcap")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "service.cli"]


@pytest.mark.skipif(not PROC_NET_TCP.is_file(), reason="needs Linux /proc/net/tcp")
def test_serve_without_flags_binds_where_the_environment_says(tiny_repo: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPCAP_")}
    env |= {
        "COMPCAP_HOST": "0.0.0.0",
        "COMPCAP_PORT": str(port),
        "COMPCAP_REPO": str(tiny_repo),
        "COMPCAP_INTRA_OP_THREADS": "1",
    }
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*compcap(), "serve"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"exited with {proc.returncode}:\n{log_path.read_text()}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0, trust_env=False).is_success:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"no /healthz in 60 s:\n{log_path.read_text()}"
            time.sleep(0.1)
        assert listening_addresses(port) == ["00000000"]  # 0.0.0.0, not 127.0.0.1 (0100007F)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
