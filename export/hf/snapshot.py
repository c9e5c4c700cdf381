"""A Hugging Face snapshot directory (what ``save_pretrained`` writes, or a hub download the user
already has): its ``config.json`` says which architecture it is. Nothing is ever fetched: every load
runs with the hub's offline switches set and ``local_files_only``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# model_type in config.json → what CompCap makes of it, and whether this version imports it
KNOWN = {
    "vision-encoder-decoder": ("captioner", "VisionEncoderDecoderModel (e.g. ViT + GPT-2)", True),
    "blip": ("captioner", "BlipForConditionalGeneration", True),
    "git": ("captioner", "GitForCausalLM", True),
    "clip": ("ranker", "CLIPModel", True),
}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class SnapshotError(ValueError):
    """A directory that is not a snapshot CompCap can import; the message says why and what is."""


@dataclass(frozen=True)
class Snapshot:
    path: Path
    model_type: str
    role: str  # captioner | ranker
    architecture: str
    config: dict[str, Any]


def supported() -> str:
    """The importable architectures, for error messages."""
    return ", ".join(f"{arch} ({kind})" for kind, (_, arch, built) in KNOWN.items() if built)


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
    model_type = str(config.get("model_type", ""))
    if model_type not in KNOWN or not KNOWN[model_type][2]:
        what = (
            f"{model_type!r} ({KNOWN[model_type][1]}, not importable yet)"
            if model_type in KNOWN
            else repr(model_type)
        )
        raise SnapshotError(f"{config_file}: model_type {what}; importable: {supported()}")
    role, architecture, _ = KNOWN[model_type]
    return Snapshot(root, model_type, role, architecture, config)


@contextmanager
def offline() -> Iterator[None]:
    """The hub's offline switches set for the duration (restored after)."""
    saved = {k: os.environ.get(k) for k in OFFLINE}
    os.environ.update(OFFLINE)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


__all__ = ["KNOWN", "Snapshot", "SnapshotError", "offline", "read_snapshot", "supported"]
