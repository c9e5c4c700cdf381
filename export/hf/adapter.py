"""What the importer needs of one captioner architecture: an ``Adapted`` captioner — its transformers
module wrapped as the contract's two graphs, and its token ids — built by the architecture's module
(``ADAPTERS``: model_type → module with ``adapt(snapshot, preprocessing) -> Adapted``). Adding an
architecture is one module with ``adapt``, its line here and in ``snapshot.KNOWN``, and its test."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Any

from torch import nn

from export.hf.snapshot import Snapshot, SnapshotError
from service.manifest import Preprocessing

ADAPTERS = {"vision-encoder-decoder": "export.hf.ved", "blip": "export.hf.blip", "git": "export.hf.git"}
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL's codes in preprocessor_config.json


@dataclass(frozen=True)
class Adapted:
    """An imported captioner ready to export: ``encoder`` (``image`` uint8 [B, H, W, 3] → ``memory``
        [B, M, D], ``state`` [B, 1]) and ``step`` (the contract's step, see ``export.hf.ved``); ``start``
        begins every prefix, ``eos`` ends a caption, ``pad`` pads; ``max_tokens`` is generate's
        ``max_length`` (the start token counted); ``early_stopping`` its beam search's; ``cached_step`` the
    same step with its cross-attention projected once per image (``export.hf.step.ImageCacheStep``), for
    an architecture that has one; ``kv_step`` the step of contract v3 that also carries each row's
    self-attention keys and values in its state (``export.hf.kv_step.KeyValueStep``), likewise."""

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


def adapt(snapshot: Snapshot, pre: Preprocessing) -> Adapted:
    """The snapshot's architecture module's ``adapt``."""
    module = importlib.import_module(ADAPTERS[snapshot.model_type])
    adapted: Adapted = module.adapt(snapshot, pre)
    return adapted


def preprocessing(snapshot: Snapshot) -> Preprocessing:
    """The image processor of ``preprocessor_config.json``: its final size (``size`` height and width,
    or ``crop_size`` after resizing the shortest edge to ``size.shortest_edge``), filter, rescale and
    mean/std."""
    path = snapshot.path / "preprocessor_config.json"
    if not path.is_file():
        raise SnapshotError(f"{snapshot.path}: no preprocessor_config.json (the image processor)")
    config = json.loads(path.read_text(encoding="utf-8"))
    size = config.get("size") or {}
    crop = config.get("crop_size") or {}
    if isinstance(size, int):  # older CLIP-style configs: an integer size is the shortest edge
        size = {"shortest_edge": size}
    if isinstance(crop, int):  # and an integer crop a square
        crop = {"height": crop, "width": crop}
    resize: list[int] | None = None
    if {"height", "width"} <= set(size) and not config.get("do_center_crop"):
        height, width = int(size["height"]), int(size["width"])
    elif "shortest_edge" in size and {"height", "width"} <= set(crop) and config.get("do_center_crop", True):
        edge = int(size["shortest_edge"])
        resize, height, width = [edge, edge], int(crop["height"]), int(crop["width"])
    else:
        raise SnapshotError(f"{path}: size {size!r} / crop_size {crop!r}: not a resize CompCap reads yet")
    rescale = float(config.get("rescale_factor", 1 / 255)) if config.get("do_rescale", True) else 1.0
    normalise = config.get("do_normalize", True)
    return Preprocessing(
        height=height,
        width=width,
        resize=resize,
        resample=RESAMPLE.get(int(config.get("resample", 2)), "bilinear"),  # type: ignore[arg-type]
        rescale=rescale,
        mean=[float(m) for m in config.get("image_mean", [0.0] * 3)] if normalise else [0.0] * 3,
        std=[float(s) for s in config.get("image_std", [1.0] * 3)] if normalise else [1.0] * 3,
    )


__all__ = ["ADAPTERS", "Adapted", "adapt", "preprocessing"]
