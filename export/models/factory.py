"""Captioner constructors by architecture kind, sized by a preset: what the zoo trains and what a study
retrains (e.g. the productivity test's BUTD) build their captioners with."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from export.models.butr import BUTR
from export.models.sat import SAT
from export.models.transformer import TransformerCaptioner
from export.presets import Preset
from service.text.vocabulary import Vocabulary

ARCHITECTURES = {"butd": "BUTD", "butr": "BUTR", "sat": "SAT", "transformer": "Transformer", "m2": "M2"}


def captioner_factory(
    kind: str, vocab: Vocabulary, region_dim: int, regions: int, p: Preset
) -> Callable[[], nn.Module]:
    """A constructor of an untrained ``kind`` captioner (a key of ``ARCHITECTURES``) over ``regions``
    regions of ``region_dim`` features with ``vocab``'s words."""
    v = len(vocab)
    factories: dict[str, Callable[[], nn.Module]] = {
        "butd": lambda: BUTR(v, region_dim, p.word_dim, p.hidden_dim, p.joint_dim, p.attention_dim),
        "butr": lambda: BUTR(v, region_dim, p.word_dim, p.hidden_dim, p.joint_dim, p.attention_dim),
        "sat": lambda: SAT(v, region_dim, p.word_dim, p.hidden_dim, p.attention_dim),
        "transformer": lambda: TransformerCaptioner(
            v,
            region_dim,
            regions,
            p.transformer_dim,
            p.transformer_heads,
            p.transformer_layers,
            max_tokens=p.max_length + 2,
        ),
        "m2": lambda: TransformerCaptioner(
            v,
            region_dim,
            regions,
            p.transformer_dim,
            p.transformer_heads,
            p.transformer_layers,
            memory_slots=p.memory_slots,
            meshed=True,
            max_tokens=p.max_length + 2,
        ),
    }
    return factories[kind]
