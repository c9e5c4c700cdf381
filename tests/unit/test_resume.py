"""Resumable zoo training: a saved model loads bit for bit and skips its training; another fingerprint
trains again."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from export.resume import Checkpoints, fingerprint
from export.train import TrainLog


def test_a_checkpoint_skips_training_and_restores_the_weights(tmp_path: Path) -> None:
    calls: list[str] = []

    def train(model: nn.Module) -> TrainLog:
        calls.append("trained")
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param))
        return TrainLog(seconds=1.5, epochs=3, val_bleu4=[0.1, 0.2, 0.15], selected_epoch=2)

    key = fingerprint(preset="tiny", seed=0)
    torch.manual_seed(0)
    first = nn.Linear(4, 3)
    log = Checkpoints(tmp_path, key).trained("m", first, train)
    torch.manual_seed(0)
    second = nn.Linear(4, 3)
    resumed = Checkpoints(tmp_path, key)
    log2 = resumed.trained("m", second, train)
    assert calls == ["trained"] and resumed.loaded == ["m"] and not second.training
    assert log2 == log
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    other = Checkpoints(tmp_path, fingerprint(preset="tiny", seed=1))
    other.trained("m", nn.Linear(4, 3), train)
    assert calls == ["trained", "trained"] and other.loaded == []
    assert fingerprint(a=1, b=2) == fingerprint(b=2, a=1) != fingerprint(a=1, b=3)
