"""Nothing a run makes survives it, also when it fails: a child run (``failing_run.py``) builds an image,
creates a volume, starts a container and fails; afterwards its storage, mounts and
processes are gone and the system's storage holds the images it held before. A run killed outright
(SIGKILL: no teardown) leaves its storage; the next run sweeps it (``tier.sweep``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.container.tier import ROOT, Run, leftovers, sweep, system_images

pytestmark = pytest.mark.container

CHILD = [sys.executable, "-m", "pytest", "-qs", "-p", "no:cacheprovider", "tests/container/failing_run.py"]


def test_a_failing_run_leaves_nothing_behind(run: Run) -> None:
    before = system_images()
    child = subprocess.run(CHILD, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    out = child.stdout + child.stderr
    assert child.returncode == 1 and "this run fails on purpose" in out, out[-3000:]
    found = re.search(r"RUN_PATH=(\S+)", out)
    assert found, out[-3000:]
    assert leftovers(Path(found[1])) == []
    assert "LEFT BEHIND" not in out and "left behind 0" in out, out[-3000:]
    assert system_images() == before


def test_a_killed_run_is_swept_by_the_next(run: Run, tmp_path: Path) -> None:
    before = system_images()
    ready = tmp_path / "ready"
    env = {**os.environ, "COMPCAP_TIER_CHILD_READY": str(ready)}
    child = subprocess.Popen(
        CHILD, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert child.poll() is None, "the child run ended before it was ready"
            assert time.monotonic() < deadline, "the child run was not ready in 300 s"
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    path = Path(ready.read_text())
    assert any(left.startswith("process") for left in leftovers(path)), "its container should still run"
    assert path in sweep()
    assert leftovers(path) == []
    assert system_images() == before
