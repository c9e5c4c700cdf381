"""The other variants of the gateway image build (they are not run: Triton and CUDA are not here).

The Triton variant (``VARIANT=serve-triton``) is built whole and imports its backend's client. The GPU
variant (``VARIANT=serve-gpu``) carries NVIDIA's CUDA and cuDNN wheels: its dependency layer is about
3.5 GB, and buildah writes it three times over (the build container, its committed layer, the final
image's copy), about 12 GB at once, and its build took 172 s alone and 377-421 s beside the other tiers
(which it slowed: ``make test`` 19.5 min against 12.6). So the tier builds it whole only where
``COMPCAP_CONTAINER_GPU_BUILD=1`` asks and 16 GB are free; otherwise it checks what only that variant
adds — every file of its lock, downloaded and hash-checked by the build image's pip
(``build_image.sh --check-lock``) — and says so in its closing figures."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.container.tier import FIGURES, GPU, Run

pytestmark = pytest.mark.container

GPU_BUILD_FREE_BYTES = 16e9


def test_the_triton_variant_builds_and_imports_its_client(run: Run, triton_image: str) -> None:
    image = triton_image
    probe = (
        "import importlib.util, tritonclient.grpc, service; "
        "assert importlib.util.find_spec('onnxruntime') is None; print('ok')"
    )
    assert run("run", "--rm", "--entrypoint", "python", image, "-c", probe).strip() == "ok"
    assert run.image(image)["Healthcheck"]["Test"], "the HEALTHCHECK was dropped"


def test_the_gpu_variant_builds_or_its_lock_installs(run: Run, context: Path) -> None:
    free = shutil.disk_usage(run.path).free
    asked = os.environ.get("COMPCAP_CONTAINER_GPU_BUILD") == "1"
    if asked and free >= GPU_BUILD_FREE_BYTES:
        start = time.monotonic()
        image = run.build("--variant", "serve-gpu", "--tag", GPU, context=context)
        size = run.image(image)["Size"]
        FIGURES["gpu"] = f"built in {time.monotonic() - start:.0f} s, {size / 1e9:.1f} GB"
        return
    out = run.build("--variant", "serve-gpu", "--check-lock", context=context, last=False)
    assert "every hash checked" in out, out
    why = f"{free / 1e9:.0f} GB free" if asked else "not asked for: COMPCAP_CONTAINER_GPU_BUILD=1"
    FIGURES["gpu"] = f"image not built ({why}, needs ~{GPU_BUILD_FREE_BYTES / 1e9:.0f} GB); {out.strip()}"
