"""The images every load test sends: SceneWorld images (random ones where ``export`` is not installed)
and their PNG bytes, the same for the gateway, the peers and the floor."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def bench_images(n: int, height: int, width: int, seed: int = 20261121) -> np.ndarray:
    """SceneWorld images when the export package is importable (a dev checkout), else random ones."""
    try:
        from sceneworld.dataset import generate

        images, _, _ = generate(n, seed=seed, image_size=height)
        return np.ascontiguousarray(images[:, :height, :width], dtype=np.uint8)
    except ImportError:
        rng = np.random.default_rng(seed)
        return rng.integers(0, 256, (n, height, width, 3), dtype=np.uint8)


def png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


__all__ = ["bench_images", "png_bytes"]
