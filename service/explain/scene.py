"""Per-word grounding against a scene graph: what lies under each word's highest-attributed region,
GroundingScore(δ) of the caption and the pointing game (pure; SceneWorld scene graphs, see
``service.probesets``: ``objects`` in drawing order with pixel ``bbox`` [x0, y0, x1, y1], a
``background`` below the ``horizon`` row)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.explain.geometry import Area, cell_boxes, centre_inside, object_under
from service.explain.grounding import grounding_intervals, grounding_scores
from service.text.lexicon import Lexicon, object_labels

BACKDROP = "backdrop"  # above the horizon: sky or wall, which no caption word names


@dataclass(frozen=True)
class WordGrounding:
    """One word's grounding: the labels under its argmax cell, the object there (None: background), the
    class the word names (None: not a noun), and — for a noun naming an object in the scene — whether
    the argmax cell's centre fell in one of its boxes and the chance a random cell would."""

    labels: tuple[str, ...]
    object: Mapping[str, Any] | None
    noun_class: str | None
    pointing: bool | None
    chance: float | None


@dataclass(frozen=True)
class CaptionGrounding:
    words: list[WordGrounding]
    scores: dict[str, float] | None  # GroundingScore by δ key, None without nouns
    intervals: dict[str, dict[str, float | int]] | None = None  # its 95% interval over the nouns, by δ key


def scaled_scene(scene: Mapping[str, Any], height: int, width: int) -> Mapping[str, Any]:
    """``scene`` with its boxes (and horizon) in a ``height`` × ``width`` image's pixels: a scene that
    records the ``size`` [h, w] its boxes are in (one made of COCO instance boxes) is scaled; a SceneWorld
    scene graph is drawn at the served size already and comes back as it is."""
    size = scene.get("size")
    if not size or (int(size[0]), int(size[1])) == (height, width):
        return scene
    sy, sx = height / float(size[0]), width / float(size[1])
    objects = [
        {**o, "bbox": [o["bbox"][0] * sx, o["bbox"][1] * sy, o["bbox"][2] * sx, o["bbox"][3] * sy]}
        for o in scene.get("objects", [])
    ]
    return {
        **scene,
        "objects": objects,
        "horizon": float(scene.get("horizon", 0)) * sy,
        "size": [height, width],
    }


def cell_labels(
    cell: Sequence[float], scene: Mapping[str, Any]
) -> tuple[tuple[str, ...], Mapping[str, Any] | None]:
    """(labels, object) under a cell box: the covering object's labels, else the background (below the
    horizon) or the backdrop."""
    obj = object_under(cell, scene.get("objects", []))
    if obj is not None:
        return object_labels(obj), obj
    below = (cell[1] + cell[3]) / 2 >= float(scene.get("horizon", 0))
    return ((str(scene["background"]),) if below else (BACKDROP,)), None


def ground_caption(
    words: Sequence[str],
    argmax: Sequence[int],
    scene: Mapping[str, Any],
    grid: int,
    height: int,
    width: int,
    lexicon: Lexicon,
    area: Area | None = None,
) -> CaptionGrounding:
    """``words`` [T] and the region index of each word's argmax [T] → per-word grounding and
    GroundingScore(δ) for δ in ``grounding.DELTAS``; the grid covers the image, or ``area`` of it (a
    centre-cropping encoder's, ``geometry.grid_area``: the pointing game's chance counts its cells)."""
    cells = cell_boxes(grid, height, width, area)
    under = [cell_labels(cells[r], scene) for r in argmax]
    objects = scene.get("objects", [])
    out = []
    for word, r, (labels, obj) in zip(words, argmax, under, strict=True):
        cls = lexicon.noun_class(word)
        boxes = [o["bbox"] for o in objects if cls is not None and cls in object_labels(o)]
        pointing = chance = None
        if boxes:
            pointing = any(centre_inside(cells[r], b) for b in boxes)
            chance = float(np.mean([any(centre_inside(c, b) for b in boxes) for c in cells]))
        out.append(WordGrounding(labels, obj, cls, pointing, chance))
    t = len(words)
    sim = np.array([[lexicon.sim(words[i], under[j][0]) for j in range(t)] for i in range(t)]).reshape(t, t)
    nouns = np.array([w.noun_class is not None for w in out], dtype=bool)
    return CaptionGrounding(out, grounding_scores(sim, nouns), grounding_intervals(sim, nouns))
