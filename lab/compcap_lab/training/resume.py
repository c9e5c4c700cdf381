"""Resumable zoo training: every trained model's weights and training log are saved under
``<work>/checkpoints/<name>.pt`` as soon as it is trained, with a fingerprint of what it was trained
from (preset, seed, data sizes, vocabulary). A rerun of ``compcap-lab models`` with the same fingerprint
loads them instead of training again, so a run cut off after hours loses one model, not all of them;
and while a captioner trains, its state after every epoch is kept beside them
(``compcap_lab.training.train.EpochSnapshot``, ``<name>.epoch.pt``), so it loses at most one epoch.
The weights load bit for bit, and every model is seeded by its position in the plan, so a resumed
zoo equals an uninterrupted one. A checkpoint with another fingerprint is ignored and overwritten."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from compcap_lab.training.train import TrainLog

M = TypeVar("M", bound=nn.Module)


def fingerprint(**facts: Any) -> str:
    """A short hash of the facts a model's training depends on (JSON-serialisable values)."""
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Checkpoints:
    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key = Path(folder), key
        self.loaded: list[str] = []

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.pt"

    def load(self, name: str, model: nn.Module) -> TrainLog | None:
        """Load ``name``'s weights into ``model`` and return its log, if a matching checkpoint exists."""
        path = self.path(name)
        if not path.is_file():
            return None
        saved = torch.load(path, map_location="cpu", weights_only=False)  # our own files
        if saved.get("key") != self.key:
            return None
        model.load_state_dict(saved["state"])
        model.eval()  # as training leaves it
        self.loaded.append(name)
        log: TrainLog = saved["log"]
        return log

    def save(self, name: str, model: nn.Module, log: TrainLog) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path(name).with_suffix(".pt.tmp")
        torch.save({"key": self.key, "state": model.state_dict(), "log": log}, tmp)
        os.replace(tmp, self.path(name))

    def trained(self, name: str, model: M, train: Callable[[M], TrainLog]) -> TrainLog:
        """``name``'s log, from its checkpoint when one matches, else from ``train(model)`` (then saved)."""
        log = self.load(name, model)
        if log is None:
            log = train(model)
            self.save(name, model, log)
        return log

    def made(
        self, name: str, empty: Callable[[], M], make: Callable[[], tuple[M, TrainLog]]
    ) -> tuple[M, TrainLog]:
        """For a trainer that builds its own model: ``name``'s model from its checkpoint (loaded into
        ``empty()``) when one matches, else ``make()``'s (then saved)."""
        model = empty()
        log = self.load(name, model)
        if log is None:
            model, log = make()
            self.save(name, model, log)
        return model, log


__all__ = ["Checkpoints", "fingerprint"]
