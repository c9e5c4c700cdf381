"""A container-tier run that fails on purpose, for ``test_leftovers.py`` (run in a child pytest; its name
is not ``test_*`` so the tier does not collect it). It makes what a run makes — a build with a cached
layer, a volume, a running container — then fails; with
``COMPCAP_TIER_CHILD_READY`` set it writes its storage's path there and waits to be killed instead."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.container.tier import Run


def test_a_run_that_fails(run: Run, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {run.bases['PYTHON_IMAGE']}\nRUN echo made > /made\n")
    run("build", "--format", "docker", "--tag", "localhost/compcap-tier-child:1", str(tmp_path), timeout=300)
    run("volume", "create", "child-state")
    run.start("localhost/compcap-tier-child:1", "-v", "child-state:/state", command=["sleep", "600"])
    print(f"RUN_PATH={run.path}", flush=True)
    ready = os.environ.get("COMPCAP_TIER_CHILD_READY")
    if ready:
        Path(ready).write_text(str(run.path))
        time.sleep(600)  # killed here
    raise AssertionError("this run fails on purpose")
