"""``export.models.factory``: the one place the zoo and the studies build captioners by kind."""

from __future__ import annotations

import pytest
from torch import nn

from export.models.factory import ARCHITECTURES, captioner_factory
from export.presets import get_preset
from service.text.vocabulary import Vocabulary


def test_every_architecture_builds_a_fresh_captioner() -> None:
    preset = get_preset("tiny")
    vocab = Vocabulary.build(["a red bus on a road", "a black cat"])
    regions = preset.grid * preset.grid
    for kind in ARCHITECTURES:
        make = captioner_factory(kind, vocab, preset.region_dim, regions, preset)
        first, second = make(), make()
        assert isinstance(first, nn.Module) and first is not second, kind
        assert sum(p.numel() for p in first.parameters()) > 0, kind
    with pytest.raises(KeyError):
        captioner_factory("lstm", vocab, preset.region_dim, regions, preset)


def test_butd_and_butr_share_one_architecture() -> None:
    """BUTD is BUTR trained without its ranking loss (``train_captioner(rank=...)``): same network."""
    preset = get_preset("tiny")
    vocab = Vocabulary.build(["a red bus"])
    regions = preset.grid * preset.grid
    butd = captioner_factory("butd", vocab, preset.region_dim, regions, preset)()
    butr = captioner_factory("butr", vocab, preset.region_dim, regions, preset)()
    assert type(butd) is type(butr)
    shapes = [{k: v.shape for k, v in m.state_dict().items()} for m in (butd, butr)]
    assert shapes[0] == shapes[1]
