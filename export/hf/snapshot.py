"""A Hugging Face snapshot directory (what ``save_pretrained`` writes, or a hub download the user
already has): its ``config.json`` says which architecture it is (``export.hf.architectures.read_snapshot``
recognises it). Nothing is ever fetched: every load runs with the hub's offline switches set and
``local_files_only``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

    def tokenizer_file(self) -> Path:
        """Its ``tokenizer.json``; a ``SnapshotError`` where there is none."""
        path = self.path / "tokenizer.json"
        if not path.is_file():
            raise SnapshotError(f"{self.path}: no tokenizer.json (CompCap reads fast tokenizers only)")
        return path


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


__all__ = ["Snapshot", "SnapshotError", "offline"]
