"""``compcap serve`` with onnxruntime's CUDA build where CUDA cannot load: ``COMPCAP_DEVICE=cuda`` exits 2
with one line naming the setting and the reason; ``auto`` serves on the CPU and every surface (the log,
``GET /v1/models``, ``/healthz``, ``compcap_model_device_info``) says CPU. Before, the backend logged
"on ['CUDAExecutionProvider', 'CPUExecutionProvider']" while every session ran on the CPU.

The CUDA build is ``make ort-gpu``'s (onnxruntime-gpu from requirements-serve-gpu.lock, without the CUDA
libraries), first on PYTHONPATH; its CUDA provider's library is made unloadable on purpose (a copy of
the package whose ``libonnxruntime_providers_cuda.so`` is not a library), so the test means the same on a
machine that has CUDA. The GPU itself cannot be had here: that side is the GPU check's
(``scripts/gpu_check.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.backends.device import CUDA_LIBRARY
from service.metrics import MODEL_DEVICE
from tests.integration.conftest import ROOT, free_port, serving

GPU_BUILD = ROOT / ".ort-gpu" / "site" / "onnxruntime"


@pytest.fixture(scope="module")
def unloadable_cuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PYTHONPATH entry whose ``onnxruntime`` is the CUDA build with its CUDA provider unloadable:
    links to the installed package's files, the provider library replaced by a file that is not one."""
    if not (GPU_BUILD / "capi" / CUDA_LIBRARY).is_file():
        pytest.skip("onnxruntime's CUDA build is not installed (make ort-gpu)")
    root = tmp_path_factory.mktemp("ort-gpu")
    package = root / "onnxruntime"
    package.mkdir()
    for entry in GPU_BUILD.iterdir():
        if entry.name != "capi":
            (package / entry.name).symlink_to(entry)
    (package / "capi").mkdir()
    for entry in (GPU_BUILD / "capi").iterdir():
        if entry.name != CUDA_LIBRARY:
            (package / "capi" / entry.name).symlink_to(entry)
    (package / "capi" / CUDA_LIBRARY).write_bytes(b"not a shared library\n")
    return root


def env_with(path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(path), "COMPCAP_INTRA_OP_THREADS": "1", **extra}


def test_the_cuda_build_lists_cuda(unloadable_cuda: Path) -> None:
    code = "import onnxruntime as o; print(o.__file__); print(o.get_available_providers())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env_with(unloadable_cuda),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith(str(unloadable_cuda)), "the CUDA build shadows the CPU one"
    assert "CUDAExecutionProvider" in out, "this is what made the old log say CUDA"


def test_device_cuda_where_cuda_cannot_load_exits_2_in_one_line(
    unloadable_cuda: Path, tiny_repo: Path
) -> None:
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(free_port()), "--repo", str(tiny_repo)]
    done = subprocess.run(
        cmd, env=env_with(unloadable_cuda, COMPCAP_DEVICE="cuda"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("compcap serve: COMPCAP_DEVICE=cuda: CUDA cannot be used here: ")
    assert CUDA_LIBRARY in lines[0] and "cannot load" in lines[0], lines[0]


def test_device_auto_serves_on_the_cpu_and_says_so(
    unloadable_cuda: Path, tiny_repo: Path, tmp_path: Path
) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--repo", str(tiny_repo)]
    log = tmp_path / "serve.log"
    env = env_with(unloadable_cuda, COMPCAP_DEVICE="auto", COMPCAP_LOG_FORMAT="text")
    with serving(cmd, env, port, log) as url:
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        assert models["device"] == "cpu" and set(models["devices"].values()) == {"cpu"}
        assert len(models["devices"]) >= 6, models["devices"]  # encoder, inits, steps, rankers
        assert httpx.get(f"{url}/healthz", timeout=10).json()["device"] == "cpu"
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        for name in models["devices"]:
            assert (
                f'{MODEL_DEVICE}{{device="cpu",model="{name}",provider="CPUExecutionProvider"}} 1.0'
                in metrics
            )
        image = (ROOT / "service/web/static/samples/example_0.png").read_bytes()
        answer = httpx.post(f"{url}/v1/captions", files={"image": ("a.png", image, "image/png")}, timeout=30)
        assert answer.status_code == 200, answer.text
    text = log.read_text()
    assert "COMPCAP_DEVICE=auto: serving on the CPU: onnxruntime's CUDA provider cannot load" in text, text
    assert "on cpu (COMPCAP_DEVICE=auto" in text, text
    assert "CUDAExecutionProvider" not in text.split("onnxruntime backend:")[1].splitlines()[0]
