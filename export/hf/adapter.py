"""What the importer needs of a snapshot before export: its image processor as the contract's
``Preprocessing``, and its model adapted by its architecture's record (``export.hf.architectures``):
an ``Adapted`` captioner — its transformers module wrapped as the contract's two graphs, and its token
ids — or an ``AdaptedRanker``."""

from __future__ import annotations

import json

from export.hf.architecture import Adapted, AdaptedRanker
from export.hf.architectures import get_architecture
from export.hf.snapshot import Snapshot, SnapshotError
from service.manifest import Preprocessing

RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL's codes in preprocessor_config.json


def adapt(snapshot: Snapshot, pre: Preprocessing) -> Adapted:
    """A captioner snapshot adapted by its architecture's record."""
    adapted = get_architecture(snapshot.model_type).adapt(snapshot, pre)
    if not isinstance(adapted, Adapted):
        raise SnapshotError(f"{snapshot.path}: {snapshot.architecture} is a {snapshot.role}, not a captioner")
    return adapted


def adapt_ranker(snapshot: Snapshot, pre: Preprocessing) -> AdaptedRanker:
    """A ranker snapshot adapted by its architecture's record."""
    adapted = get_architecture(snapshot.model_type).adapt(snapshot, pre)
    if not isinstance(adapted, AdaptedRanker):
        raise SnapshotError(f"{snapshot.path}: {snapshot.architecture} is a {snapshot.role}, not a ranker")
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


__all__ = ["adapt", "adapt_ranker", "preprocessing"]
