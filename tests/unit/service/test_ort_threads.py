"""Threads per onnxruntime call: a number asked for is kept; 0 gives a heavy model's calls every core
and shares the cores among a light model's calls the executor runs at once, never below one."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.backends.onnxruntime.backend import (
    WIDE_MODEL_BYTES,
    OnnxRuntimeBackend,
    intra_op_threads,
    model_threads,
    usable_cores,
)
from service.manifest import load_manifest


@pytest.mark.parametrize(
    ("requested", "executors", "cores", "expected"),
    [(3, 4, 2, 3), (0, 4, 2, 1), (0, 4, 16, 4), (0, 1, 8, 8), (0, 8, 2, 1), (0, 3, 8, 2)],
)
def test_auto_shares_the_cores_among_concurrent_calls(
    requested: int, executors: int, cores: int, expected: int
) -> None:
    assert intra_op_threads(requested, executors, cores) == expected


@pytest.mark.parametrize(
    ("requested", "size", "cores", "expected"),
    [
        (0, WIDE_MODEL_BYTES, 2, 2),  # heavy: every core
        (0, WIDE_MODEL_BYTES, 16, 16),
        (0, WIDE_MODEL_BYTES - 1, 2, 1),  # light: the cores shared by 4 executor threads
        (0, WIDE_MODEL_BYTES - 1, 16, 4),
        (3, WIDE_MODEL_BYTES, 16, 3),  # asked for: kept, whatever the model
        (3, 10, 16, 3),
    ],
)
def test_auto_gives_a_heavy_models_calls_every_core(
    requested: int, size: int, cores: int, expected: int
) -> None:
    assert model_threads(requested, 4, size, cores) == expected


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"^requested"):
        intra_op_threads(-1, 4)
    with pytest.raises(ValueError, match=r"^executor_threads"):
        intra_op_threads(0, 0)
    with pytest.raises(ValueError, match=r"^model_bytes"):
        model_threads(0, 4, -1)


def test_the_backend_runs_with_the_resolved_count(tiny_repo: Path) -> None:
    manifest = load_manifest(tiny_repo)
    backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=0, executor_threads=4)
    assert backend.threads == max(1, usable_cores() // 4)
    # the tiny repository's models are all light: each gets the light share
    assert set(backend.threads_of) == set(backend.sessions)
    assert set(backend.threads_of.values()) == {backend.threads}
    asked = OnnxRuntimeBackend(tiny_repo, manifest, threads=2)
    assert asked.threads == 2 and set(asked.threads_of.values()) == {2}


def test_the_backend_gives_its_heavy_models_every_core(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the heavy size lowered to the tiny repository's largest model, that model's calls get every
    core and the others keep the light share."""
    import service.backends.onnxruntime.backend as ort_backend

    manifest = load_manifest(tiny_repo)
    sizes = {m.name: m.path(tiny_repo).stat().st_size for m in manifest.models}
    largest = max(sizes, key=lambda name: sizes[name])
    monkeypatch.setattr(ort_backend, "WIDE_MODEL_BYTES", sizes[largest])
    backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=0, executor_threads=4)
    assert backend.threads_of[largest] == usable_cores()
    assert {backend.threads_of[n] for n in backend.threads_of if sizes[n] < sizes[largest]} == {
        backend.threads
    }
