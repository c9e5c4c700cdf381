"""The GPU overlays' Triton computes FP32 in FP32: Triton's onnxruntime backend leaves the CUDA provider's
default, TF32 for FP32 products (on an H200, max |CPU − CUDA| 2.3e-3 on the shipped models and 20 of the
183 pinned captions changed), which the embedded backend turns off with the provider option
``use_tf32=0``. In the Triton container ``NVIDIA_TF32_OVERRIDE=0`` does it: cuBLAS and cuDNN read it."""

from __future__ import annotations

import pytest

from tests.ops.test_k8s import GPU, ROOT, env_of, render, triton_containers

GPU_OVERLAYS = sorted(
    p.name for p in (ROOT / "k8s" / "overlays").iterdir() if p.name.startswith("triton-gpu")
)


def test_there_are_gpu_overlays() -> None:
    assert GPU_OVERLAYS == ["triton-gpu", "triton-gpu-shm"]


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_every_gpu_triton_turns_tf32_off(overlay: str) -> None:
    found = triton_containers(render(overlay))
    assert found, f"{overlay}: no Triton container"
    for workload, container in found:
        assert GPU in container.get("resources", {}).get("limits", {}), (overlay, container["name"])
        where = f"{overlay}: {workload['metadata']['name']}/{container['name']}"
        assert env_of(container).get("NVIDIA_TF32_OVERRIDE") == "0", where
