"""The split's folder (engine-core socket, metrics files): a server that died without its ``finally``
(SIGKILL, the OOM killer) leaves it behind; the next server's start removes it, never a live one's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from service.gateway import split

MAKE = "from service.gateway.split import split_folder\nprint(split_folder(), flush=True)\n"


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the directory it found
    return tmp_path


def child(code: str, temp: Path, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(temp)}
    return subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kwargs
    )


def test_a_dead_servers_folder_is_removed_and_live_ones_stay(temp: Path) -> None:
    killed = child(MAKE + "import time\ntime.sleep(600)\n", temp)
    assert killed.stdout is not None
    dead = Path(killed.stdout.readline().strip())
    killed.kill()  # SIGKILL: no finally, the folder stays; the kernel drops its lock
    killed.wait()
    running = child(MAKE + "import sys\nsys.stdin.read()\n", temp, stdin=subprocess.PIPE)
    assert running.stdout is not None and running.stdin is not None
    theirs = Path(running.stdout.readline().strip())
    ours = split.split_folder()
    foreign = temp / "compcap-core-notours"  # no owner lock: being made right now, or not a split's
    foreign.mkdir()
    try:
        assert dead.is_dir() is False, "the next start removed the dead server's folder"
        assert theirs.is_dir() and ours.is_dir() and foreign.is_dir()
        assert split.remove_stale_folders(temp) == []  # nothing else is stale
    finally:
        running.stdin.close()
        running.wait()
        split.release_split_folder(ours)
    assert not ours.exists()
    assert split.remove_stale_folders(temp) == [theirs], "its server has exited"


def test_releasing_removes_the_folder_and_its_lock(temp: Path) -> None:
    folder = split.split_folder()
    assert (folder / split.OWNER_LOCK).is_file() and oct(folder.stat().st_mode & 0o777) == "0o700"
    split.release_split_folder(folder)
    assert not folder.exists() and folder not in split._held
