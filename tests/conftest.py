"""Shared fixtures. ``tiny_repo`` builds a real tiny model repository (SceneWorld → training → ONNX →
Triton configs) once per test session; set ``COMPCAP_TEST_REPO`` to reuse an already built one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the tests' gateways keep their shared state in memory unless a test names a store: no test reads
# another's jobs from a compcap_state.db in the working directory
os.environ.setdefault("COMPCAP_STATE_URL", "")


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    existing = os.environ.get("COMPCAP_TEST_REPO")
    if existing and (Path(existing) / "manifest.json").is_file():
        return Path(existing)
    from compcap_lab.pipeline.build import build_repo

    out = tmp_path_factory.mktemp("tiny") / "model_repo"
    build_repo(out, preset="tiny", seed=0)
    return out
