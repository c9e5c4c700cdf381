"""The embedded backend keeps a read-only input on its session's device while a call passes the same
array (I/O binding; on this machine the CPU provider's "device"): the step's outputs are those of a
plain run, the image memory is uploaded once per array and reused after, a writeable or small array is
never kept; a v3 step's state_out is kept on the device when asked and taken back as the next call's
state without a copy, with the outputs of host arrays; and the beam batch hands the step read-only
memory that changes object when images join or leave."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from service.backends.base import DeviceArray, infer_outputs
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.beam_batch import BeamBatch, Joining
from service.engine.cohorts import CohortBatch
from service.engine.params import SearchParams
from service.manifest import load_manifest


def step_feed(repo: Path, images: int = 4, beams: int = 3) -> dict[str, np.ndarray]:
    dims = {t.name: t.dims for t in load_manifest(repo).model("butr_step").inputs}
    assert "state_index" in dims, "a build writes steps that gather their states (contract v3)"
    rows, rng = images * beams, np.random.default_rng(1)
    return {
        "memory": rng.standard_normal((images, *dims["memory"][1:])).astype(np.float32),
        "image_index": np.repeat(np.arange(images), beams).astype(np.int64),
        "tokens": rng.integers(4, 20, (rows, 1)).astype(np.int64),
        "length": np.ones(rows, dtype=np.int64),
        "state": np.zeros((0, dims["state"][1]), np.float32),
        "state_new": rng.standard_normal((rows, dims["state"][1])).astype(np.float32),
        "state_index": np.arange(rows, dtype=np.int64),
    }


def test_a_kept_state_goes_back_in_without_a_copy_and_gives_the_host_outputs(tiny_repo: Path) -> None:
    backend = OnnxRuntimeBackend(tiny_repo, load_manifest(tiny_repo), threads=1, device="cpu")
    feed = step_feed(tiny_repo)
    names = backend.outputs["butr_step"]
    first = asyncio.run(infer_outputs(backend, "butr_step", feed, names, keep=["state_out"]))
    kept = first["state_out"]
    assert isinstance(kept, DeviceArray) and kept.shape == (12, feed["state_new"].shape[1])
    host_first = asyncio.run(backend.infer("butr_step", feed))
    assert np.array_equal(kept.numpy(), host_first["state_out"])
    reorder = np.array([11, 0, 0, 3, 5, 5, 2, 9, 8, 7, 1, 12], dtype=np.int64)  # 12: a new image's state
    fresh = feed["state_new"][:1] + 1.0
    on_device = asyncio.run(
        backend.infer(
            "butr_step",
            {**feed, "state": kept, "state_new": fresh, "state_index": reorder},
            keep=["state_out"],
        )
    )
    on_host = asyncio.run(
        backend.infer(
            "butr_step",
            {**feed, "state": host_first["state_out"], "state_new": fresh, "state_index": reorder},
        )
    )
    gathered = np.concatenate([host_first["state_out"], fresh])[reorder]
    v2_like = asyncio.run(
        backend.infer(
            "butr_step",
            {**feed, "state_new": gathered, "state_index": np.arange(12, dtype=np.int64)},
        )
    )
    for name in names:
        device = on_device[name].numpy() if name == "state_out" else on_device[name]
        assert np.array_equal(device, on_host[name]), name
        assert np.array_equal(on_host[name], v2_like[name]), name
    try:
        asyncio.run(backend.infer("butr_step", feed, outputs=["logprobs"], keep=["state_out"]))
    except Exception as exc:
        assert "cannot keep outputs not asked for" in str(exc)
    else:
        raise AssertionError("keeping an output not asked for must be refused")


def test_read_only_memory_stays_on_the_device_and_gives_the_same_outputs(tiny_repo: Path) -> None:
    backend = OnnxRuntimeBackend(tiny_repo, load_manifest(tiny_repo), threads=1, device="cpu")
    backend.resident.min_bytes = 1  # the tiny model's memory is small: keep it anyway
    feed = step_feed(tiny_repo)
    plain = asyncio.run(backend.infer("butr_step", feed))
    assert backend.resident.uploads == 0, "a writeable array is not kept"
    memory = feed["memory"].copy()
    memory.flags.writeable = False
    for _ in range(3):
        bound = asyncio.run(backend.infer("butr_step", {**feed, "memory": memory}))
        assert set(bound) == set(plain)
        for name, value in plain.items():
            assert np.array_equal(bound[name], value), name
    assert (backend.resident.uploads, backend.resident.reuses) == (1, 2)
    other = memory.copy()
    other.flags.writeable = False
    asyncio.run(backend.infer("butr_step", {**feed, "memory": other}))
    assert backend.resident.uploads == 2, "another array is uploaded"
    only = asyncio.run(backend.infer("butr_step", {**feed, "memory": other}, outputs=["state_out"]))
    assert list(only) == ["state_out"] and np.array_equal(only["state_out"], plain["state_out"])
    backend.resident.min_bytes = 1 << 40
    asyncio.run(backend.infer("butr_step", {**feed, "memory": other}))
    assert backend.resident.uploads == 2 and backend.resident.reuses == 3, "below min_bytes: not kept"


def joining(key: int, images: int) -> Joining:
    memory = np.full((images, 2, 3), float(key), np.float32)
    return Joining(
        key, memory, np.zeros((images, 4), np.float32), SearchParams("m", beam_size=2, n_best=2, max_length=4)
    )


def test_the_batch_memory_is_read_only_and_a_new_object_per_change() -> None:
    for batch in (BeamBatch(4, 4, 1, 2, (0,)), CohortBatch(4, 4, 1, 2, (0,), (2,))):
        batch.add_many([joining(0, 2)])
        first = batch.memory
        assert first is not None and not first.flags.writeable
        assert batch.memory is first, "unchanged images: the same array, so the device copy is reused"
        batch.add_many([joining(1, 3)])
        second = batch.memory
        assert second is not first and not second.flags.writeable and second.shape[0] == 5
        batch.discard(0)
        third = batch.memory
        assert third is not second and not third.flags.writeable and np.all(third == 1.0)
