"""Image decoding: each class of bad input is rejected with its reason code."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

from service.images.decode import ImageError, decode_image, decode_images, upright_size

H, W = 24, 32
LIMITS: dict[str, Any] = {"max_bytes": 1 << 20, "max_pixels": 25_000_000}


def encode(img: Image.Image, fmt: str = "PNG", **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def rgb_png(w: int = 40, h: int = 30) -> bytes:
    arr = np.random.default_rng(0).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    return encode(Image.fromarray(arr))


@pytest.fixture(scope="session")
def bomb_png() -> bytes:
    """A 10 000 x 10 000 PNG that compresses to a few KB."""
    return encode(Image.new("1", (10_000, 10_000)), optimize=True)


def test_valid_png_is_resized() -> None:
    out = decode_image(rgb_png(), H, W, **LIMITS)
    assert out.shape == (H, W, 3) and out.dtype == np.uint8


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "LA", "1", "CMYK", "I;16", "I"])
def test_modes_are_converted_to_rgb(mode: str) -> None:
    img = (
        Image.new("RGB", (20, 10), (200, 30, 10)).convert(mode)
        if mode not in ("I;16", "I")
        else (Image.new(mode, (20, 10), 300))
    )
    fmt = "TIFF" if mode in ("CMYK", "I;16", "I") else "PNG"
    out = decode_image(encode(img, fmt), H, W, **LIMITS)
    assert out.shape == (H, W, 3)


def test_transparent_pixels_become_white() -> None:
    img = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    out = decode_image(encode(img), H, W, **LIMITS)
    assert out.min() == 255


def test_jpeg_accepted() -> None:
    img = Image.new("RGB", (64, 48), (10, 120, 200))
    out = decode_image(encode(img, "JPEG"), H, W, **LIMITS)
    assert abs(int(out[..., 2].mean()) - 200) < 5


def test_empty_upload() -> None:
    with pytest.raises(ImageError) as info:
        decode_image(b"", H, W, **LIMITS)
    assert info.value.code == "empty_image" and "empty" in info.value.message


def test_non_image_bytes() -> None:
    with pytest.raises(ImageError) as info:
        decode_image(b"hello, this is not an image at all", H, W, **LIMITS)
    assert info.value.code == "not_an_image" and info.value.status == 400


def test_unsupported_format_rejected() -> None:
    with pytest.raises(ImageError) as info:
        decode_image(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", H, W, **LIMITS)
    assert info.value.code == "not_an_image"


def test_truncated_png() -> None:
    data = rgb_png(200, 200)
    with pytest.raises(ImageError) as info:
        decode_image(data[: len(data) // 2], H, W, **LIMITS)
    assert info.value.code == "corrupt_image" and "truncated" in info.value.message


def test_truncated_jpeg() -> None:
    arr = np.random.default_rng(1).integers(0, 256, size=(100, 100, 3), dtype=np.uint8)
    data = encode(Image.fromarray(arr), "JPEG")
    with pytest.raises(ImageError) as info:
        decode_image(data[: len(data) // 2], H, W, **LIMITS)
    assert info.value.code == "corrupt_image"


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_decompression_bomb_rejected_cheaply(bomb_png: bytes) -> None:
    assert len(bomb_png) < 100_000
    import time

    start = time.perf_counter()
    with pytest.raises(ImageError) as info:
        decode_image(bomb_png, H, W, **LIMITS)
    assert time.perf_counter() - start < 0.5  # header check, no decode
    assert info.value.code == "too_many_pixels" and info.value.status == 413
    assert "10000x10000" in info.value.message


def test_upload_too_large() -> None:
    data = rgb_png()
    with pytest.raises(ImageError) as info:
        decode_image(data, H, W, max_bytes=len(data) - 1, max_pixels=10**8)
    assert info.value.code == "image_too_large" and info.value.status == 413


def test_batch_errors_name_the_index() -> None:
    with pytest.raises(ImageError, match="image 1"):
        decode_images([rgb_png(), b"junk"], H, W, **LIMITS)
    batch = decode_images([rgb_png(), rgb_png(10, 10)], H, W, **LIMITS)
    assert batch.shape == (2, H, W, 3)


def test_check_upload_refuses_junk_and_passes_every_supported_header() -> None:
    from service.images.decode import FORMATS, check_upload, check_uploads

    arr = np.zeros((8, 8, 3), dtype=np.uint8)
    for fmt in FORMATS:
        check_upload(encode(Image.fromarray(arr), fmt), max_bytes=1 << 20)  # no error
    with pytest.raises(ImageError) as info:
        check_uploads([rgb_png(), b"hello, this is not an image at all"], max_bytes=1 << 20)
    assert info.value.code == "not_an_image" and info.value.message.startswith("image 1 ")
    with pytest.raises(ImageError) as info:
        check_upload(b"", max_bytes=1)
    assert info.value.code == "empty_image"
    with pytest.raises(ImageError) as info:
        check_upload(rgb_png(), max_bytes=10)
    assert info.value.code == "image_too_large" and info.value.status == 413
    data = rgb_png(200, 200)
    check_upload(data[: len(data) // 2], max_bytes=1 << 20)  # a good header: decoding finds the rest


@pytest.mark.parametrize(
    ("orientation", "size"), [(None, (30, 40)), (1, (30, 40)), (3, (30, 40)), (6, (40, 30)), (8, (40, 30))]
)
def test_upright_size_is_the_size_as_decoded(orientation: int | None, size: tuple[int, int]) -> None:
    """(height, width) as ``decode_image`` turns the image: an EXIF quarter turn swaps them."""
    img = Image.fromarray(np.zeros((30, 40, 3), dtype=np.uint8))
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    data = encode(img, "JPEG", exif=exif.tobytes())
    assert upright_size(data) == size
    with Image.open(io.BytesIO(data)) as opened:
        turned = ImageOps.exif_transpose(opened)
        assert (turned or opened).size[::-1] == size
