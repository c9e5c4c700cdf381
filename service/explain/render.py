"""Attribution maps as pictures: contrast stretching to [0, 1] and a heat-map overlay on the image as
PNG (PIL + numpy; no matplotlib in the gateway). Pure except for the PNG encoder."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import numpy as np
from PIL import Image

# anchor colours of the heat map, low → high (dark blue, cyan, yellow, red)
_ANCHORS = np.array([[20, 30, 120], [40, 190, 220], [250, 220, 40], [220, 30, 30]], dtype=np.float64)
LOW_PERCENTILE, HIGH_PERCENTILE = 1.0, 99.0


def stretch(values: np.ndarray) -> np.ndarray:
    """Contrast stretching (Cornia et al., 2022, §4.2): clip to the 1st–99th percentile, scale to [0, 1].
    A flat map becomes all zeros. Same shape as ``values``."""
    lo, hi = np.percentile(values, [LOW_PERCENTILE, HIGH_PERCENTILE])
    if not hi > lo:
        return np.zeros(values.shape, dtype=np.float32)
    return np.clip((values - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)


def colourise(unit: np.ndarray) -> np.ndarray:
    """[H, W] values in [0, 1] → uint8 [H, W, 3] heat-map colours."""
    pos = np.clip(unit, 0.0, 1.0) * (len(_ANCHORS) - 1)
    low = np.minimum(pos.astype(np.int64), len(_ANCHORS) - 2)
    frac = (pos - low)[..., None]
    return np.round(_ANCHORS[low] * (1 - frac) + _ANCHORS[low + 1] * frac).astype(np.uint8)


def upsample(grid_map: np.ndarray, height: int, width: int) -> np.ndarray:
    """[a, b] → [height, width] float32, bilinear."""
    img = Image.fromarray(grid_map.astype(np.float32), mode="F")
    return np.asarray(img.resize((width, height), Image.Resampling.BILINEAR), dtype=np.float32)


def place(values: np.ndarray, area: Sequence[float], height: int, width: int) -> np.ndarray:
    """[a, b] map → [height, width] float32: ``values`` resized (bilinear) onto ``area`` (x0, y0, x1, y1)
    of the image, 0 elsewhere (a centre-cropping encoder sees only its crop)."""
    x0, y0, x1, y1 = (round(v) for v in area)
    out = np.zeros((height, width), dtype=np.float32)
    if x1 > x0 and y1 > y0:
        out[y0:y1, x0:x1] = upsample(values, y1 - y0, x1 - x0)
    return out


def overlay_png(image: np.ndarray, unit_map: np.ndarray, scale: int = 2, alpha: float = 0.5) -> str:
    """The image (uint8 [H, W, 3]) with ``unit_map`` ([H, W] in [0, 1]) blended over it, enlarged
    ``scale`` times (nearest), as base64 PNG."""
    blend = (1 - alpha) * image.astype(np.float64) + alpha * colourise(unit_map).astype(np.float64)
    picture = Image.fromarray(np.round(blend).astype(np.uint8))
    if scale > 1:
        picture = picture.resize((image.shape[1] * scale, image.shape[0] * scale), Image.Resampling.NEAREST)
    buf = io.BytesIO()
    picture.save(buf, format="PNG", compress_level=6)
    return base64.b64encode(buf.getvalue()).decode("ascii")
