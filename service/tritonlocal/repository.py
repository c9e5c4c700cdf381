"""Mirror a model repository as python-backend models for the local Triton server.

Production configs say ``platform: "onnxruntime_onnx"`` and ``KIND_GPU``; the onnxruntime Triton backend
exists only in NVIDIA's containers. The mirror keeps every model's name, tensors (names, dtypes, dims),
``max_batch_size`` and ``dynamic_batching`` exactly as in its ``config.pbtxt``, runs on ``KIND_CPU`` with
the same instance counts, and points a copy of ``python_model.py`` at the original ONNX file. Each
config carries the ONNX file's sha256 (parameter ``compcap_model_sha256``), by which the gateway tells
a server of this repository from one of another. The original repository is never modified.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from service.backends.triton.addresses import DIGEST_PARAMETER, file_sha256
from service.checks import at_least
from service.manifest import load_manifest

PYTHON_MODEL = Path(__file__).with_name("python_model.py")
MARKER = ".compcap-triton-mirror"


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a ``config.pbtxt`` with Triton's own protobuf (raises on an invalid config)."""
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def mirror_config(
    original: model_config_pb2.ModelConfig, onnx_path: Path, intra_op_threads: int = 1
) -> model_config_pb2.ModelConfig:
    """The python-backend config serving ``onnx_path`` with the tensors and batching of ``original``."""
    at_least(0, intra_op_threads=intra_op_threads)
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(original)
    config.ClearField("platform")
    config.backend = "python"
    config.ClearField("default_model_filename")
    if config.HasField("optimization"):
        config.optimization.ClearField("execution_accelerators")
    counts = [group.count or 1 for group in original.instance_group] or [1]
    del config.instance_group[:]
    group = config.instance_group.add()
    group.count = sum(counts)
    group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
    config.parameters["onnx_path"].string_value = str(onnx_path.resolve())
    config.parameters["intra_op_threads"].string_value = str(intra_op_threads)
    return config


def _prepare(out: Path, repo: Path) -> None:
    out, repo = out.resolve(), repo.resolve()
    if out == repo or repo in out.parents or out in repo.parents:
        raise ValueError(f"the mirror {out} must lie outside the repository {repo}")
    if out.exists():
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise ValueError(f"{out} is not empty and is not a python-backend mirror; refusing to overwrite")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text(f"python-backend mirror of {repo}\n", encoding="utf-8")


def write_python_repository(repo: Path, out: Path, intra_op_threads: int = 1) -> list[str]:
    """Write ``out/<model>/config.pbtxt`` and ``out/<model>/1/model.py`` for every model in the
    repository's manifest; returns the model names. ``out`` is replaced if it is an earlier mirror."""
    manifest = load_manifest(repo)
    _prepare(out, repo)
    names = []
    for entry in manifest.models:
        original = read_config(repo / entry.name / "config.pbtxt")
        if original.name != entry.name:
            raise ValueError(f"{entry.name}/config.pbtxt names model {original.name!r}")
        onnx_path = entry.path(repo)
        if not onnx_path.is_file():
            raise FileNotFoundError(f"model {entry.name!r}: {onnx_path} does not exist")
        config = mirror_config(original, onnx_path, intra_op_threads)
        if DIGEST_PARAMETER not in config.parameters:  # what the gateway checks each server by
            config.parameters[DIGEST_PARAMETER].string_value = file_sha256(onnx_path)
        (out / entry.name / "1").mkdir(parents=True)
        text = text_format.MessageToString(config)
        (out / entry.name / "config.pbtxt").write_text(text, encoding="utf-8")
        shutil.copyfile(PYTHON_MODEL, out / entry.name / "1" / "model.py")
        names.append(entry.name)
    return names
