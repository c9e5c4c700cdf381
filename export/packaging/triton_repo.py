"""The Triton model repository: one ``config.pbtxt`` per model (``platform: "onnxruntime_onnx"``, KIND_GPU),
validated against Triton's ``ModelConfig`` protobuf, plus ``manifest.json`` and ``vocab.json``."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from service.backends.triton.addresses import DIGEST_PARAMETER, file_sha256
from service.manifest import MANIFEST_NAME, Manifest, ModelEntry, TensorSpec

PREFERRED_BATCH = (8, 16, 32)


def _tensor(spec: TensorSpec) -> str:
    dims = ", ".join(str(d) for d in spec.dims)
    return f'  {{\n    name: "{spec.name}"\n    data_type: TYPE_{spec.dtype}\n    dims: [ {dims} ]\n  }}'


def config_pbtxt(entry: ModelEntry, instances: int = 1, digest: str | None = None) -> str:
    """Text of ``config.pbtxt`` for one model. Per-image models batch implicitly with dynamic batching;
    ``<cap>_step`` is batched by the gateway itself (``max_batch_size: 0``, explicit dims). ``digest``:
    the sha256 of its ONNX file, published as the parameter the gateway checks each Triton server by
    (``compcap_model_sha256``: old and new weights never mix behind one name during a rollout)."""
    parts = [
        f'name: "{entry.name}"',
        'platform: "onnxruntime_onnx"',
        f"max_batch_size: {entry.max_batch_size}",
        "input [\n" + ",\n".join(_tensor(t) for t in entry.inputs) + "\n]",
        "output [\n" + ",\n".join(_tensor(t) for t in entry.outputs) + "\n]",
    ]
    if entry.max_batch_size > 0:
        preferred = ", ".join(str(b) for b in PREFERRED_BATCH if b <= entry.max_batch_size)
        parts.append(
            f"dynamic_batching {{\n  preferred_batch_size: [ {preferred} ]\n"
            "  max_queue_delay_microseconds: 500\n}"
        )
    parts.append(f"instance_group [\n  {{\n    count: {instances}\n    kind: KIND_GPU\n  }}\n]")
    if digest is not None:
        parts.append(
            f'parameters {{\n  key: "{DIGEST_PARAMETER}"\n  value: {{ string_value: "{digest}" }}\n}}'
        )
    return "\n".join(parts) + "\n"


def parse_config(text: str) -> model_config_pb2.ModelConfig:
    """Parse ``config.pbtxt`` text with Triton's own protobuf (raises on an invalid config)."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def write_repository(out: Path, manifest: Manifest) -> None:
    """Write every model's ``config.pbtxt`` (the ONNX files are already in place) and the manifest."""
    for entry in manifest.models:
        if not entry.path(out).is_file():
            raise FileNotFoundError(f"missing ONNX file for {entry.name}: {entry.path(out)}")
        text = config_pbtxt(entry, digest=file_sha256(entry.path(out)))
        parsed = parse_config(text)
        if parsed.name != entry.name:
            raise ValueError(f"config for {entry.name} parsed with name {parsed.name!r}")
        (out / entry.name / "config.pbtxt").write_text(text, encoding="utf-8")
    (out / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
