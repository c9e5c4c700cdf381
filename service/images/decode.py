"""Decoding and validation of uploaded images.

``decode_image`` turns untrusted bytes into a uint8 [H, W, 3] array at the model's input size.
It checks the size of the upload, opens only a few safe formats, rejects images whose header
announces too many pixels *before* decoding them (decompression bombs), forces a full decode so
truncated files fail here, and converts any mode to RGB. Failures raise ``ImageError`` with a
reason code and a message naming the problem.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from service.checks import at_least

FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
ORIENTATION_TAG = 0x0112  # EXIF orientation; 5–8 turn the image a quarter (``ImageOps.exif_transpose``)
ROTATED = frozenset({5, 6, 7, 8})

Image.init()
# each format's own header test (PIL's plugin ``_accept``): what ``Image.open(formats=FORMATS)`` tries
_ACCEPT = tuple(accept for fmt in FORMATS if (accept := Image.OPEN[fmt][1]) is not None)

# The pixel limit is ours (``max_pixels``, checked before decoding); PIL's own warning is noise.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class ImageError(ValueError):
    """A rejected image. ``code`` is a stable reason, ``status`` the HTTP status it maps to."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def check_upload(data: bytes, *, max_bytes: int, label: str = "image") -> None:
    """The checks that need no decoding — not empty, within ``max_bytes``, and a header that one of
    ``FORMATS``' own PIL plugins accepts — so that junk is refused in microseconds, without a thread
    hop or a decoder. Raises ``ImageError`` as ``decode_image`` would."""
    if not data:
        raise ImageError("empty_image", f"{label} is empty (0 bytes)")
    if len(data) > max_bytes:
        raise ImageError(
            "image_too_large", f"{label} is {len(data)} bytes; the limit is {max_bytes} bytes", status=413
        )
    head = data[:16]
    if not any(accept(head) for accept in _ACCEPT):
        raise ImageError(
            "not_an_image", f"{label} is not an image in a supported format ({', '.join(FORMATS)})"
        )


def check_uploads(blobs: Sequence[bytes], *, max_bytes: int) -> None:
    """``check_upload`` for every blob; errors name the image index."""
    for i, blob in enumerate(blobs):
        check_upload(blob, max_bytes=max_bytes, label=f"image {i}")


def decode_image(
    data: bytes, height: int, width: int, *, max_bytes: int, max_pixels: int, label: str = "image"
) -> np.ndarray:
    """Decode ``data`` and resize it (bilinear) to uint8 [height, width, 3]."""
    at_least(1, height=height, width=width)
    check_upload(data, max_bytes=max_bytes, label=label)
    try:
        img = Image.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError:
        raise ImageError(
            "not_an_image", f"{label} is not an image in a supported format ({', '.join(FORMATS)})"
        ) from None
    except Image.DecompressionBombError:
        raise ImageError("too_many_pixels", f"{label} has too many pixels", status=413) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError("corrupt_image", f"{label} could not be read: {exc}") from None
    with img:
        w, h = img.size
        if w < 1 or h < 1:
            raise ImageError("corrupt_image", f"{label} has an empty size {w}x{h}")
        if w * h > max_pixels:
            raise ImageError(
                "too_many_pixels",
                f"{label} is {w}x{h} = {w * h} pixels; the limit is {max_pixels} pixels",
                status=413,
            )
        try:
            img.load()  # force the full decode: truncated or corrupt data fails here
        except Image.DecompressionBombError:
            raise ImageError("too_many_pixels", f"{label} has too many pixels", status=413) from None
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise ImageError(
                "corrupt_image", f"{label} is truncated or corrupt ({img.format}): {exc}"
            ) from None
        try:
            rgb = _to_rgb(ImageOps.exif_transpose(img) or img)
        except (OSError, ValueError) as exc:
            raise ImageError(
                "unsupported_mode", f"{label} has unsupported mode {img.mode!r}: {exc}"
            ) from None
    if rgb.size != (width, height):
        rgb = rgb.resize((width, height), Image.Resampling.BILINEAR)
    out = np.asarray(rgb, dtype=np.uint8)
    if out.shape != (height, width, 3):  # pragma: no cover - guarded by _to_rgb
        raise ImageError("unsupported_mode", f"{label} decoded to shape {out.shape}")
    return out


def _to_rgb(img: Image.Image) -> Image.Image:
    """RGB copy of ``img``; transparent pixels are composited on white."""
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img, dtype=np.float64)
        hi = float(arr.max()) or 1.0
        img = Image.fromarray((arr * (255.0 / hi)).clip(0, 255).astype(np.uint8), mode="L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def upright_size(data: bytes) -> tuple[int, int]:
    """(height, width) of an image ``decode_image`` read: its header's size, turned as its EXIF
    orientation turns it."""
    with Image.open(io.BytesIO(data), formats=FORMATS) as img:
        w, h = img.size
        if img.getexif().get(ORIENTATION_TAG) in ROTATED:
            w, h = h, w
    return h, w


def decode_images(
    blobs: Sequence[bytes], height: int, width: int, *, max_bytes: int, max_pixels: int
) -> np.ndarray:
    """Decode every blob into one uint8 [B, height, width, 3] batch; errors name the image index."""
    arrays = [
        decode_image(b, height, width, max_bytes=max_bytes, max_pixels=max_pixels, label=f"image {i}")
        for i, b in enumerate(blobs)
    ]
    return np.stack(arrays) if arrays else np.zeros((0, height, width, 3), dtype=np.uint8)
