"""``compcap serve`` with no flags takes its address and repository from ``COMPCAP_*`` (as a container
sets them): ``COMPCAP_HOST=0.0.0.0`` must bind every interface, not loopback. Connects only to 127.0.0.1."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import free_port, serving

pytestmark = pytest.mark.integration

PROC_NET_TCP = Path("/proc/net/tcp")
LISTEN = "0A"


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
    with serving([*compcap(), "serve"], env, port, tmp_path / "serve.log", path="/healthz"):
        assert listening_addresses(port) == ["00000000"]  # 0.0.0.0, not 127.0.0.1 (0100007F)
