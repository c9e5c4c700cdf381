"""``LocalPostgres``: Debian's PostgreSQL (``initdb`` + ``postgres``) in a temporary directory on an
OS-assigned 127.0.0.1 port, trust authentication, always stopped and removed. PostgreSQL refuses to run
as root: as root the server runs as the ``postgres`` user Debian's package creates (``runuser``)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@contextmanager
def local_postgres(database: str = "compcap") -> Iterator[str]:
    """A running PostgreSQL; yields its SQLAlchemy URL (``postgresql+psycopg://...``)."""
    initdb, postgres, pg_isready = _bin("initdb"), _bin("postgres"), _bin("pg_isready")
    if not (initdb and postgres and pg_isready):
        pytest.skip("PostgreSQL is not installed (make test-tools installs Debian's postgresql)")
    root = Path(tempfile.mkdtemp(prefix="compcap-pg-"))
    data, sockets = root / "data", root / "sockets"
    data.mkdir()
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
        shutil.chown(sockets, "postgres")
    log = root / "server.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            _as_server_user(
                [initdb, "-D", str(data), "-A", "trust", "-U", "compcap", "--no-sync", "-E", "UTF8"]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = _free_port()
        server = [postgres, "-D", str(data), "-p", str(port), "-k", str(sockets)]
        server += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=100"]
        with log.open("wb") as out:
            proc = subprocess.Popen(_as_server_user(server), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [pg_isready, "-h", "127.0.0.1", "-p", str(port)], capture_output=True, timeout=10
            )
            if ready.returncode == 0:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        subprocess.run(
            [_bin("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "compcap", database],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield f"postgresql+psycopg://compcap@127.0.0.1:{port}/{database}"
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # a fast shutdown: open connections are ended
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["local_postgres"]
