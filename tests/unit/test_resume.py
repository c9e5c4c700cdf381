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


def test_the_zoo_encoder_trains_once_then_loads_bit_for_bit(tmp_path: Path, monkeypatch) -> None:
    """``resumable_encoder`` trains the visual encoder on its first call only; the training itself is
    replaced by a random init here (the real one takes minutes), the save/load path is the real one."""
    import numpy as np

    from export import zoo
    from export.models.visual_encoder import VisualEncoder
    from export.presets import get_preset

    p = get_preset("tiny")
    calls: list[int] = []

    def fake_train(images, labels, sizes, preset, seed):  # type: ignore[no-untyped-def]
        calls.append(seed)
        torch.manual_seed(seed + 99)
        return VisualEncoder(
            preset.encoder_channels, preset.region_dim, preset.grid, preset.image_size
        ), TrainLog(seconds=2.0, epochs=1)

    monkeypatch.setattr(zoo, "train_visual_encoder", fake_train)
    monkeypatch.setattr(zoo, "cell_label_arrays", lambda graphs, preset: {})
    images = np.random.default_rng(0).integers(0, 255, (3, p.image_size, p.image_size, 3), dtype=np.uint8)
    first, log = zoo.resumable_encoder(tmp_path, images, [], p, 0)
    second, log2 = zoo.resumable_encoder(tmp_path, images, [], p, 0)
    assert calls == [0] and log2 == log and not second.training
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    zoo.resumable_encoder(tmp_path, images[::-1].copy(), [], p, 0)  # other images: trains again
    assert calls == [0, 0]
