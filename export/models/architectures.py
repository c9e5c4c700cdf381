"""The captioner architectures, one record each: how to build an untrained one from a preset, what its
``<cap>_step`` graph reads, which preset field is its learning rate, whether it trains a ranking head,
and its place in the model zoo. The zoo, the default repository build, the studies and the report read
these records; adding an architecture is one record here (+ its model class and its test). The model
classes are imported when a captioner is built, so reading the records (the report) needs no torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

from export.presets import Preset

if TYPE_CHECKING:
    from torch import nn

Reads = Literal["last_token", "prefix"]
Builder = Callable[[int, int, int, Preset], "nn.Module"]


@dataclass(frozen=True)
class Architecture:
    """One captioner architecture.

    ``build(vocab_size, region_dim, regions, preset)`` returns an untrained captioner over ``regions``
    regions of ``region_dim`` features: ``forward(regions [B, R, D], tokens [B, T]) -> logprobs
    [B, T-1, V]`` for training, ``init``/``step`` for the exported graphs. ``reads``: what its step
    reads of the tokens — "last_token" (a recurrent state carries the rest) or "prefix" (the whole
    prefix, every step). ``learning_rate_field``: the ``Preset`` field of its peak learning rate.
    ``ranks``: trained with the ranking loss too (GradNorm); its ranking head is then served as a
    ranker of the captioner's name, joint with it, and the report has a re-ranked row
    ("<display>+RR"). ``zoo``: the zoo trains it on every held-out group ("every_group") or on the
    extra group only ("extra_group"); ``zoo_full``: the zoo's FULL captioner (nothing held out) is one
    of these."""

    name: str  # the kind: the zoo's captioners are <name>_g<group> and <name>_full
    display: str  # the manifest's "architecture" and the report's row
    build: Builder
    reads: Reads
    learning_rate_field: str
    ranks: bool
    zoo: Literal["every_group", "extra_group"]
    zoo_full: bool = False

    def __post_init__(self) -> None:
        if self.learning_rate_field not in {f.name for f in fields(Preset)}:
            raise ValueError(f"{self.name}: no preset field {self.learning_rate_field!r}")

    def learning_rate(self, preset: Preset) -> float:
        """The peak learning rate ``preset`` gives this architecture."""
        return float(getattr(preset, self.learning_rate_field))

    @property
    def ranker_display(self) -> str:
        """The manifest's "architecture" of its ranking head (``ranks`` only)."""
        return f"{self.display} ranking head"


def _butr(vocab_size: int, region_dim: int, regions: int, p: Preset) -> nn.Module:
    from export.models.butr import BUTR
    from export.models.lstm_sizes import LSTMSizes

    return BUTR(LSTMSizes.of(vocab_size, region_dim, p), p.joint_dim)


def _sat(vocab_size: int, region_dim: int, regions: int, p: Preset) -> nn.Module:
    from export.models.lstm_sizes import LSTMSizes
    from export.models.sat import SAT

    return SAT(LSTMSizes.of(vocab_size, region_dim, p))


def _transformer(vocab_size: int, region_dim: int, regions: int, p: Preset) -> nn.Module:
    from export.models.transformer import TransformerCaptioner

    dims = (p.transformer_dim, p.transformer_heads, p.transformer_layers)
    return TransformerCaptioner(vocab_size, region_dim, regions, *dims, max_tokens=p.max_length + 2)


def _m2(vocab_size: int, region_dim: int, regions: int, p: Preset) -> nn.Module:
    from export.models.transformer import TransformerCaptioner

    dims = (p.transformer_dim, p.transformer_heads, p.transformer_layers)
    return TransformerCaptioner(
        vocab_size,
        region_dim,
        regions,
        *dims,
        memory_slots=p.memory_slots,
        meshed=True,
        max_tokens=p.max_length + 2,
    )


# In the report's row order; the zoo trains, per group, the "every_group" ones in this order (BUTD, BUTR),
# then the "extra_group" ones (SAT, Transformer, M2), then FULL. BUTD is BUTR trained without its ranking
# loss: the same network.
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("sat", "SAT", _sat, "last_token", "learning_rate", ranks=False, zoo="extra_group"),
        Architecture(
            "butd",
            "BUTD",
            _butr,
            "last_token",
            "learning_rate",
            ranks=False,
            zoo="every_group",
            zoo_full=True,
        ),
        Architecture("butr", "BUTR", _butr, "last_token", "learning_rate", ranks=True, zoo="every_group"),
        Architecture(
            "transformer",
            "Transformer",
            _transformer,
            "prefix",
            "transformer_learning_rate",
            ranks=False,
            zoo="extra_group",
        ),
        Architecture("m2", "M2", _m2, "prefix", "transformer_learning_rate", ranks=False, zoo="extra_group"),
    )
}


def get_architecture(name: str) -> Architecture:
    """The record of architecture ``name`` (a key of ``ARCHITECTURES``)."""
    if name not in ARCHITECTURES:
        raise KeyError(f"architecture must be one of {sorted(ARCHITECTURES)}, got {name!r}")
    return ARCHITECTURES[name]


__all__ = ["ARCHITECTURES", "Architecture", "Builder", "Reads", "get_architecture"]
