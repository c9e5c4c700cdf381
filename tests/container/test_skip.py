"""Where the machine cannot run containers the tier says so in one line and runs nothing: run as an
unprivileged user (``setpriv``), the tier's own collection deselects every test and names the check that
decided it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.container.tier import ROOT, Run

pytestmark = pytest.mark.container


def test_where_containers_cannot_run_the_tier_says_why_in_one_line(run: Run) -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv (util-linux) to run the tier as another user")
    done = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "pytest", "-q",
         "-p", "no:cacheprovider", "tests/container"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("container tier:")]
    assert done.returncode == 0 and len(said) == 1, done.stdout + done.stderr
    assert "skipped: the machine cannot run containers: not root" in said[0], said
    assert not any(line.startswith(("SKIPPED", "FAILED", "ERROR")) for line in lines), done.stdout
