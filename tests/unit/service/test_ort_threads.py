"""Threads per onnxruntime call: a number asked for is kept; 0 shares the cores among the calls the
executor runs at once, never below one."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.backends.onnxruntime import OnnxRuntimeBackend, intra_op_threads, usable_cores
from service.manifest import load_manifest


@pytest.mark.parametrize(
    ("requested", "executors", "cores", "expected"),
    [(3, 4, 2, 3), (0, 4, 2, 1), (0, 4, 16, 4), (0, 1, 8, 8), (0, 8, 2, 1), (0, 3, 8, 2)],
)
def test_auto_shares_the_cores_among_concurrent_calls(
    requested: int, executors: int, cores: int, expected: int
) -> None:
    assert intra_op_threads(requested, executors, cores) == expected


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"^requested"):
        intra_op_threads(-1, 4)
    with pytest.raises(ValueError, match=r"^executor_threads"):
        intra_op_threads(0, 0)


def test_the_backend_runs_with_the_resolved_count(tiny_repo: Path) -> None:
    manifest = load_manifest(tiny_repo)
    backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=0, executor_threads=4)
    assert backend.threads == max(1, usable_cores() // 4)
    assert OnnxRuntimeBackend(tiny_repo, manifest, threads=2).threads == 2
