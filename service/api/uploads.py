"""Uploaded images to model input, for every route that takes images: the cheap checks inline (junk
is refused without a thread hop), the decoding off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from service.api.settings import ServiceSettings
from service.images.decode import check_uploads, decode_images
from service.manifest import ImageSpec


async def decode_uploads(blobs: Sequence[bytes], image: ImageSpec, settings: ServiceSettings) -> np.ndarray:
    """uint8 [B, H, W, 3] at the model's input size; raises ``ImageError`` naming the image index."""
    check_uploads(blobs, max_bytes=settings.max_upload_bytes)
    return await asyncio.to_thread(
        decode_images,
        blobs,
        image.height,
        image.width,
        max_bytes=settings.max_upload_bytes,
        max_pixels=settings.max_image_pixels,
    )
