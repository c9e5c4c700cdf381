"""The imported architectures, keyed by the ``model_type`` of a snapshot's ``config.json``: every module
of this package that defines an ``ARCHITECTURE`` record (``export.hf.architecture.Architecture``) —
ViT + GPT-2 and other ``VisionEncoderDecoderModel`` (``ved``), BLIP (``blip``), GIT (``git``) and the CLIP
ranker (``clip``). Adding an architecture is one module here with its record, its name in the list at
the bottom (the order error messages name them in), and its test. ``read_snapshot`` recognises a
snapshot by this registry."""

from __future__ import annotations

import json
from pathlib import Path

from export.hf.architecture import Architecture
from export.hf.architectures import blip, clip, git, ved
from export.hf.snapshot import Snapshot, SnapshotError

ARCHITECTURES: dict[str, Architecture] = {}


def register(architecture: Architecture) -> Architecture:
    """Add ``architecture``; a ``model_type`` registered already is refused (``ValueError``)."""
    if architecture.model_type in ARCHITECTURES:
        raise ValueError(f"model_type {architecture.model_type!r} is registered already")
    ARCHITECTURES[architecture.model_type] = architecture
    return architecture


def supported() -> str:
    """The importable architectures, for error messages: each its class, an example where its record
    names one, and its ``model_type`` ("VisionEncoderDecoderModel, e.g. ViT + GPT-2 (model_type
    vision-encoder-decoder); GitForCausalLM (model_type git)"), separated by semicolons."""
    return "; ".join(
        f"{record.name}{f', e.g. {record.example}' if record.example else ''} (model_type {model_type})"
        for model_type, record in ARCHITECTURES.items()
        if record.importable
    )


def get_architecture(model_type: str) -> Architecture:
    """The record of ``model_type``; ``SnapshotError`` naming the importable ones for any other."""
    record = ARCHITECTURES.get(model_type)
    if record is None or not record.importable:
        what = f"{model_type!r} ({record.name}, not importable yet)" if record else repr(model_type)
        raise SnapshotError(f"model_type {what}; importable: {supported()}")
    return record


def read_snapshot(path: str | Path) -> Snapshot:
    """The snapshot at ``path``; ``SnapshotError`` for a missing or unreadable ``config.json`` or an
    architecture this version does not import."""
    root = Path(path)
    config_file = root / "config.json"
    if not config_file.is_file():
        raise SnapshotError(f"{root}: no config.json (a snapshot directory written by save_pretrained)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{config_file}: not readable JSON ({exc})") from None
    try:
        record = get_architecture(str(config.get("model_type", "")))
    except SnapshotError as exc:
        raise SnapshotError(f"{config_file}: {exc}") from None
    return Snapshot(root, record.model_type, record.role, record.name, config)


for _builtin in (ved.ARCHITECTURE, blip.ARCHITECTURE, git.ARCHITECTURE, clip.ARCHITECTURE):
    register(_builtin)

__all__ = ["ARCHITECTURES", "get_architecture", "read_snapshot", "register", "supported"]
