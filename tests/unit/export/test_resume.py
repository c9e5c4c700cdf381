"""Resumable zoo training: a saved model loads bit for bit and skips its training; another fingerprint
trains again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from compcap_lab.training.resume import Checkpoints, fingerprint
from compcap_lab.training.train import TrainLog


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


def test_a_model_its_trainer_builds_is_made_once_then_loaded(tmp_path: Path) -> None:
    """``Checkpoints.made``: for trainers that build their own model (VSE++): made and saved once,
    then loaded into an empty model of the same shape; another key makes it again."""
    calls: list[int] = []

    def make() -> tuple[nn.Module, TrainLog]:
        calls.append(1)
        return nn.Linear(4, 3), TrainLog(seconds=0.5, epochs=1)

    store = Checkpoints(tmp_path, fingerprint(part="vsepp", seed=3))
    first, log = store.made("vsepp_g1", lambda: nn.Linear(4, 3), make)
    again = Checkpoints(tmp_path, fingerprint(part="vsepp", seed=3))
    second, log2 = again.made("vsepp_g1", lambda: nn.Linear(4, 3), make)
    assert calls == [1] and again.loaded == ["vsepp_g1"] and log2 == log
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    Checkpoints(tmp_path, fingerprint(part="vsepp", seed=4)).made("vsepp_g1", lambda: nn.Linear(4, 3), make)
    assert calls == [1, 1]


def test_the_zoo_encoder_trains_once_then_loads_bit_for_bit(tmp_path: Path, monkeypatch) -> None:
    """``resumable_encoder`` trains the visual encoder on its first call only; the training itself is
    replaced by a random init here (the real one takes minutes), the save/load path is the real one."""
    import numpy as np

    from compcap_lab.pipeline import zoo
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


class _CutOff(Exception):
    pass


@pytest.mark.parametrize("arch", ["butd", "butr"])  # butr: the ranking loss and its GradNorm weights too
def test_a_captioner_cut_off_mid_training_resumes_at_its_last_epoch_bit_for_bit(
    arch: str, tmp_path: Path
) -> None:
    """Three epochs in one go equal one epoch, a crash right after its snapshot, and a resumed run: the
    weights, the log and the selected epoch (the resumed run trains epochs 2-3 only)."""
    from dataclasses import replace

    from compcap_lab.training.train import EpochSnapshot, Validation, train_captioner
    from export.models.architectures import ARCHITECTURES
    from export.presets import get_preset
    from service.text.vocabulary import Vocabulary

    p = replace(get_preset("tiny"), caption_epochs=3, patience=5, batch_size=8)
    words = ["a red cube", "a blue ball near a cube", "two green balls", "a cube on a ball"]
    captions = [[words[i % 4], words[(i + 1) % 4]] for i in range(24)]
    vocab = Vocabulary.build(c for caps in captions for c in caps)
    regions = torch.randn(24, 4, 16, generator=torch.Generator().manual_seed(0))
    val = Validation(regions[:4], [c for c in captions[:4]])

    def run(snapshot: EpochSnapshot | None) -> tuple[nn.Module, TrainLog]:
        torch.manual_seed(5)
        model = ARCHITECTURES[arch].build(len(vocab), 16, 4, p)
        log = train_captioner(
            model,
            regions,
            captions,
            vocab,
            p,
            0,
            "t",
            rank=ARCHITECTURES[arch].ranks,
            val=val,
            snapshot=snapshot,
        )
        return model, log

    whole, whole_log = run(None)

    class CrashAfterFirst(EpochSnapshot):
        def save(self, state: dict) -> None:  # type: ignore[type-arg]
            super().save(state)
            raise _CutOff  # the process dies right after the first epoch's snapshot

    path = tmp_path / "m.epoch.pt"
    with pytest.raises(_CutOff):
        run(CrashAfterFirst(path, "k"))
    resumed, resumed_log = run(EpochSnapshot(path, "k"))
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert resumed_log.losses == whole_log.losses and resumed_log.val_bleu4 == whole_log.val_bleu4
    assert resumed_log.selected_epoch == whole_log.selected_epoch and resumed_log.epochs == 3
    assert EpochSnapshot(path, "other key").load() is None  # another fingerprint starts afresh
