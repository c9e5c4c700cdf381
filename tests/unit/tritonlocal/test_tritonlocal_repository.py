"""The python-backend mirror served by the local Triton keeps each model's name, tensors, max_batch_size
and dynamic batching exactly as in its ``config.pbtxt``, and never touches the original repository."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from service.manifest import load_manifest
from service.tritonlocal.repository import (
    MARKER,
    PYTHON_MODEL,
    mirror_config,
    read_config,
    write_python_repository,
)

KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU

GPU_CONFIG = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
instance_group [ { count: 2 kind: KIND_GPU }, { count: 1 kind: KIND_GPU gpus: [ 1 ] } ]
optimization { execution_accelerators { gpu_execution_accelerator : [ { name : "tensorrt" } ] } }
"""


def tensors(config: model_config_pb2.ModelConfig) -> list[tuple[str, str, tuple[int, ...]]]:
    return [
        (t.name, model_config_pb2.DataType.Name(t.data_type), tuple(t.dims))
        for t in [*config.input, *config.output]
    ]


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_mirror_config_of_a_gpu_config(tmp_path: Path) -> None:
    from google.protobuf import text_format

    original = text_format.Parse(GPU_CONFIG, model_config_pb2.ModelConfig())
    onnx = tmp_path / "model.onnx"
    mirror = mirror_config(original, onnx, intra_op_threads=2)
    assert (mirror.name, mirror.max_batch_size) == ("m", 8)
    assert tensors(mirror) == tensors(original)
    assert mirror.dynamic_batching == original.dynamic_batching
    assert (mirror.backend, mirror.platform) == ("python", "")
    assert [(g.kind, g.count) for g in mirror.instance_group] == [(KIND_CPU, 3)]
    assert not mirror.optimization.execution_accelerators.gpu_execution_accelerator
    assert mirror.parameters["onnx_path"].string_value == str(onnx.resolve())
    assert mirror.parameters["intra_op_threads"].string_value == "2"
    with pytest.raises(ValueError, match="intra_op_threads"):
        mirror_config(original, onnx, intra_op_threads=-1)


def test_mirror_of_the_tiny_repository(tiny_repo: Path, tmp_path: Path) -> None:
    before = digest(tiny_repo)
    out = tmp_path / "mirror"
    names = write_python_repository(tiny_repo, out, intra_op_threads=1)
    manifest = load_manifest(tiny_repo)
    assert names == [m.name for m in manifest.models]
    for entry in manifest.models:
        original = read_config(tiny_repo / entry.name / "config.pbtxt")
        mirror = read_config(out / entry.name / "config.pbtxt")
        assert mirror.name == original.name == entry.name
        assert mirror.max_batch_size == original.max_batch_size == entry.max_batch_size
        assert tensors(mirror) == tensors(original)
        assert mirror.HasField("dynamic_batching") == original.HasField("dynamic_batching")
        assert mirror.dynamic_batching == original.dynamic_batching
        assert mirror.backend == "python" and not mirror.platform
        assert {g.kind for g in mirror.instance_group} == {KIND_CPU}
        assert sum(g.count for g in mirror.instance_group) == sum(g.count for g in original.instance_group)
        assert Path(mirror.parameters["onnx_path"].string_value) == entry.path(tiny_repo).resolve()
        assert (out / entry.name / "1" / "model.py").read_bytes() == PYTHON_MODEL.read_bytes()
    assert digest(tiny_repo) == before, "the original repository was modified"
    # an earlier mirror is replaced; a folder that is not a mirror, or the repository itself, is refused
    assert write_python_repository(tiny_repo, out) == names and (out / MARKER).is_file()
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a python-backend mirror"):
        write_python_repository(tiny_repo, stranger)
    assert (stranger / "keep.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="outside the repository"):
        write_python_repository(tiny_repo, tiny_repo / "mirror")
    assert digest(tiny_repo) == before


def test_triton_modules_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import service.backends.triton.backend, service.tritonlocal.server, service.tritonlocal.repository\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert not [m for m in sys.modules if m.startswith('export')], 'export was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
