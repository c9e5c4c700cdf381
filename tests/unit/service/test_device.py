"""The device setting's pure parts and the embedded backend's truth about it, on the CPU build of
onnxruntime this machine has (the CUDA build, where CUDA cannot load, is the integration test
``test_device_fallback``): the providers asked for per device, TF32 off unless allowed, the device read
from a session's providers, the loader's own reason for a provider library that cannot load, and
``device=cuda`` refused naming the setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from service.backends import device as dev
from service.backends.onnxruntime.backend import OnnxRuntimeBackend, providers
from service.backends.onnxruntime.settings import OnnxruntimeSettings
from service.manifest import load_manifest
from service.metrics import MODEL_DEVICE, Metrics


def test_provider_options_per_device() -> None:
    both = [dev.CUDA_PROVIDER, dev.CPU_PROVIDER]
    assert dev.provider_options("cpu", both) == [dev.CPU_PROVIDER]
    assert dev.provider_options("auto", [dev.CPU_PROVIDER]) == [dev.CPU_PROVIDER]
    for device in ("auto", "cuda"):
        assert dev.provider_options(device, both) == [
            (dev.CUDA_PROVIDER, {"use_tf32": "0"}),
            dev.CPU_PROVIDER,
        ]
    assert dev.provider_options("cuda", both, tf32=True)[0] == (dev.CUDA_PROVIDER, {"use_tf32": "1"})


def test_an_unknown_device_names_the_setting() -> None:
    with pytest.raises(ValueError, match="COMPCAP_DEVICE='gpu'"):
        dev.provider_options("gpu", [])
    with pytest.raises(ValueError, match="device"):
        OnnxruntimeSettings(device="gpu")  # type: ignore[arg-type]


def test_the_device_is_read_from_the_session_providers() -> None:
    assert dev.session_device([dev.CUDA_PROVIDER, dev.CPU_PROVIDER]) == "cuda"
    assert dev.session_device([dev.CPU_PROVIDER]) == "cpu"
    assert dev.session_device([]) == "cpu"
    assert dev.summary({"a": "cuda", "b": "cuda"}) == "cuda"
    assert dev.summary({"a": "cuda", "b": "cpu"}) == "mixed"
    assert dev.summary({}) == "none"


def test_the_probe_graph_is_a_valid_model() -> None:
    session = ort.InferenceSession(dev._identity_graph(), providers=[dev.CPU_PROVIDER])
    x = np.array([3.5], dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    assert y.tolist() == [3.5]


def test_a_provider_library_that_cannot_load_gives_the_loaders_reason(tmp_path: Path) -> None:
    assert "has no libonnxruntime_providers_cuda.so" in (dev.cuda_library_problem(tmp_path) or "")
    (tmp_path / dev.CUDA_LIBRARY).write_bytes(b"not a shared library")
    problem = dev.cuda_library_problem(tmp_path)
    assert problem is not None and dev.CUDA_LIBRARY in problem and "cannot load" in problem


def test_the_cpu_build_has_no_cuda_to_use() -> None:
    if dev.CUDA_PROVIDER in ort.get_available_providers():
        pytest.skip("this onnxruntime is the CUDA build (test_device_fallback covers it)")
    assert "no CUDAExecutionProvider" in (dev.cuda_problem() or "")
    assert providers("auto") == providers("cpu") == [dev.CPU_PROVIDER]
    with pytest.raises(dev.DeviceError, match="COMPCAP_DEVICE=cuda: CUDA cannot be used here"):
        providers("cuda")


def test_the_backend_says_where_each_model_runs(tiny_repo: Path) -> None:
    manifest = load_manifest(tiny_repo)
    metrics = Metrics()
    backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=1, metrics=metrics, device="cpu")
    served = set(manifest.served_models())
    assert set(backend.devices) == served and set(backend.devices.values()) == {"cpu"}
    assert all(p[0] == dev.CPU_PROVIDER for p in backend.session_providers.values())
    exposition = metrics.exposition().decode()
    for name in served:
        line = f'{MODEL_DEVICE}{{device="cpu",model="{name}",provider="CPUExecutionProvider"}} 1.0'
        assert line in exposition, name
    if dev.CUDA_PROVIDER not in ort.get_available_providers():
        with pytest.raises(dev.DeviceError, match="COMPCAP_DEVICE=cuda"):
            OnnxRuntimeBackend(tiny_repo, manifest, threads=1, device="cuda")


def test_the_split_parent_checks_cuda_in_a_child_process() -> None:
    """The split's parent (``api_processes`` > 1) asks in a child process, never here, and gives the same
    answer: a CUDA session it opened would keep a context (GPU memory) in a process that loads no model."""
    code = (
        "from service.backends import device\n"
        "from service.cli.errors import UsageError\n"
        "from service.gateway.server import check_device\n"
        "from service.settings import Settings\n"
        "here = []\n"
        "device.cuda_problem = lambda: here.append(1)\n"
        "try:\n"
        "    check_device(Settings(backend='onnxruntime', device='cuda', api_processes=2))\n"
        "    print('ok')\n"
        "except UsageError as exc:\n"
        "    print(exc)\n"
        "print(len(here))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    said, asked_here = done.stdout.strip().splitlines()[-2:]
    assert asked_here == "0"
    expected = dev.cuda_problem()
    if expected is None:
        assert said == "ok"
    else:
        assert said == f"COMPCAP_DEVICE=cuda: CUDA cannot be used here: {expected}"
    assert dev.cuda_problem_in_child() == expected
