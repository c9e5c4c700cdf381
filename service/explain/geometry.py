"""Where a region is in the image, and what is under it. The visual encoder's regions are a row-major
``g × g`` grid over the image (region ``r`` = row ``r // g``, column ``r % g``); a step model's attention
over ``M = k·R`` memory slots (M2 stacks its encoder layers) folds back onto the ``R`` regions by
summing the ``k`` slots of each region. Pure numpy; shapes in the docstrings."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MIN_COVER = 0.25  # an object is "under" a cell when it covers at least this share of the cell


def grid_size(regions: int) -> int | None:
    """g with g*g == ``regions``, or None when the regions are not a square grid."""
    g = math.isqrt(regions)
    return g if g * g == regions else None


def fold_slots(weights: np.ndarray, regions: int) -> np.ndarray:
    """[..., M] attention over memory slots → [..., R]: slot ``m`` belongs to region ``m % R``."""
    m = weights.shape[-1]
    if m % regions:
        raise ValueError(f"{m} memory slots do not fold onto {regions} regions")
    return weights.reshape(*weights.shape[:-1], m // regions, regions).sum(-2)


Area = tuple[float, float, float, float]  # (x0, y0, x1, y1) in image pixels


def grid_area(height: int, width: int, resize: Sequence[int] | None, crop: Sequence[int]) -> Area:
    """Where an encoder's input lies in a ``height`` × ``width`` image: the whole image, or — when the
    image is resized to ``resize`` (h, w) and cropped at the centre to ``crop`` (h, w) — the crop's box
    in the image's own pixels."""
    if resize is None:
        return (0.0, 0.0, float(width), float(height))
    top, left = (resize[0] - crop[0]) // 2, (resize[1] - crop[1]) // 2
    sy, sx = height / resize[0], width / resize[1]
    return (left * sx, top * sy, (left + crop[1]) * sx, (top + crop[0]) * sy)


def cell_boxes(grid: int, height: int, width: int, area: Area | None = None) -> np.ndarray:
    """float64 [g*g, 4] pixel boxes (x0, y0, x1, y1) of the grid cells, row-major, over the image or
    over ``area`` of it (``grid_area``)."""
    x0, y0, x1, y1 = area if area is not None else (0.0, 0.0, float(width), float(height))
    edges_y = np.linspace(y0, y1, grid + 1)
    edges_x = np.linspace(x0, x1, grid + 1)
    rows, cols = np.divmod(np.arange(grid * grid), grid)
    return np.stack([edges_x[cols], edges_y[rows], edges_x[cols + 1], edges_y[rows + 1]], axis=1)


def pool_to_grid(values: np.ndarray, grid: int) -> np.ndarray:
    """[H, W] per-pixel values → [g*g] per-cell sums (H, W multiples of g)."""
    h, w = values.shape
    if h % grid or w % grid:
        raise ValueError(f"a {h}x{w} map does not pool onto a {grid}x{grid} grid")
    return values.reshape(grid, h // grid, grid, w // grid).sum(axis=(1, 3)).reshape(-1)


def _overlap(box: Sequence[float], boxes: np.ndarray) -> np.ndarray:
    """Intersection area of ``box`` with each of ``boxes`` [K, 4]."""
    w = np.clip(np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0]), 0, None)
    h = np.clip(np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1]), 0, None)
    return np.asarray(w * h)


def object_under(cell: Sequence[float], objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The scene-graph object under a cell box: the one covering most of it (later-drawn objects win
    ties: they are on top), if it covers at least ``MIN_COVER`` of the cell; else None (background)."""
    if not objects:
        return None
    boxes = np.array([o["bbox"] for o in objects], dtype=np.float64)
    cover = _overlap(cell, boxes) / max((cell[2] - cell[0]) * (cell[3] - cell[1]), 1e-9)
    best = int(len(cover) - 1 - np.argmax(cover[::-1]))
    return objects[best] if cover[best] >= MIN_COVER else None


def centre_inside(cell: Sequence[float], box: Sequence[float]) -> bool:
    """The pointing game's hit: the cell's centre lies inside ``box``."""
    cx, cy = (cell[0] + cell[2]) / 2, (cell[1] + cell[3]) / 2
    return bool(box[0] <= cx <= box[2] and box[1] <= cy <= box[3])
