"""What one imported architecture is to CompCap (``export.hf.architectures``: one record module each):
its ``Architecture`` record — the ``model_type`` of ``config.json`` it reads, its role, the transformers
class it loads, whether this version imports it, and its ``adapt`` — and what ``adapt`` returns: an
``Adapted`` captioner or an ``AdaptedRanker``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

from export.hf.snapshot import Snapshot
from service.manifest import Preprocessing


@dataclass(frozen=True)
class Adapted:
    """An imported captioner ready to export: ``encoder`` (``image`` uint8 [B, H, W, 3] → ``memory``
        [B, M, D], ``state`` [B, 1]) and ``step`` (the contract's step, see
        ``export.hf.architectures.ved``); ``start`` begins every prefix, ``eos`` ends a caption, ``pad``
        pads; ``max_tokens`` is generate's ``max_length`` (the start token counted); ``early_stopping``
        its beam search's; ``cached_step`` the same step with its cross-attention projected once per
        image (``export.hf.step.ImageCacheStep``), for an architecture that has one; ``kv_step`` the
        step of contract v3 that also carries each row's self-attention keys and values in its state
    (``export.hf.kv_step.KeyValueStep``), likewise."""

    model: Any
    encoder: nn.Module
    step: nn.Module
    vocab_size: int
    start: int
    eos: int
    pad: int
    max_tokens: int
    early_stopping: bool
    cached_step: nn.Module | None = None  # the same step, cross-attention keys/values once per image
    kv_step: nn.Module | None = None  # the same outputs from one new token per row (contract v3)
    # the transformer optimizer's model type, heads and width of the encoder and of the step's decoder
    # (``export.hf.fusion``; None: not tried)
    fusion: tuple[tuple[str, int, int], tuple[str, int, int]] | None = None


@dataclass(frozen=True)
class AdaptedRanker:
    """An imported ranker ready to export; ``bos``/``eos``/``pad`` frame its text, ``max_tokens`` is
    its text tower's positions."""

    model: Any
    image: nn.Module
    text: nn.Module
    vocab_size: int
    embedding_dim: int
    bos: int
    eos: int
    pad: int
    max_tokens: int


@dataclass(frozen=True)
class Architecture:
    """One importable architecture: ``model_type`` as ``config.json`` names it, ``role``, ``name`` (the
    transformers class, for messages and the manifest's ``architecture``), ``importable`` (False:
    recognised, refused by this version), ``adapt(snapshot, preprocessing)``, which loads the snapshot
    offline and wraps it, and ``example`` (models of that class, for messages; empty: none named)."""

    model_type: str
    role: Literal["captioner", "ranker"]
    name: str
    adapt: Callable[[Snapshot, Preprocessing], Adapted | AdaptedRanker]
    importable: bool = True
    example: str = ""

    def __post_init__(self) -> None:
        if not self.model_type:
            raise ValueError("model_type: empty")
        if self.role not in ("captioner", "ranker"):
            raise ValueError(f"role: {self.role!r}, not 'captioner' or 'ranker'")


__all__ = ["Adapted", "AdaptedRanker", "Architecture"]
