"""Per-cell labels from a scene graph, for auxiliary supervision of the visual encoder."""

from __future__ import annotations

import numpy as np

from service.checks import above
from service.text.concepts import load_concepts

_C = load_concepts()
NOUN_LABELS: tuple[str, ...] = ("none", *_C.nouns)
COLOUR_LABELS: tuple[str, ...] = ("none", *_C.colours)
SIZE_LABELS: tuple[str, ...] = ("none", *_C.sizes)
ACTION_LABELS: tuple[str, ...] = ("none", *_C.verbs)
_INDEX = {
    "noun": {w: i for i, w in enumerate(NOUN_LABELS)},
    "colour": {w: i for i, w in enumerate(COLOUR_LABELS)},
    "size": {w: i for i, w in enumerate(SIZE_LABELS)},
    "action": {w: i for i, w in enumerate(ACTION_LABELS)},
}


def cell_labels(graph: dict, grid: int, image_size: int) -> dict[str, np.ndarray]:
    """Per grid cell (int64 [grid, grid], row = y) labels 'noun', 'colour', 'size', 'action': 0 = background
    or none, else 1 + index in the fixed lists above. A cell takes the label of the front-most (last drawn,
    i.e. last listed) object whose bbox covers the cell centre."""
    above(0, grid=grid, image_size=image_size)
    centres = (np.arange(grid, dtype=np.float64) + 0.5) * image_size / grid
    out = {key: np.zeros((grid, grid), dtype=np.int64) for key in _INDEX}
    for obj in graph["objects"]:
        x0, y0, x1, y1 = obj["bbox"]
        cols = (centres >= x0) & (centres < x1)
        rows = (centres >= y0) & (centres < y1)
        mask = rows[:, None] & cols[None, :]
        if not mask.any():
            continue
        for key, index in _INDEX.items():
            value = obj.get(key)
            out[key][mask] = index[value] if value is not None else 0
    return out
