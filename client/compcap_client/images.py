"""What the client takes as an image, turned into the file bytes it uploads.

One image is a path (``str`` or ``os.PathLike``), the file's ``bytes`` (``bytearray``,
``memoryview``), a binary file object (``open(p, "rb")``, ``io.BytesIO``), a NumPy ``uint8`` array
``[H, W, 3]`` (also ``[H, W, 4]`` and ``[H, W]``; anything with ``__array__``), or a PIL image. Files
and bytes go as they are (the gateway reads PNG, JPEG, ...); arrays and PIL images are encoded as PNG
(lossless). Several images: a list or tuple of these, or one array ``[N, H, W, 3]``.

NumPy and PIL are imported only when such an image is given: a PIL image or a NumPy array cannot
exist unless its package was imported, so ``sys.modules`` tells which it is without importing either.
Anything else raises ``TypeError``, a wrong value ``ValueError``, and a path that is not a file
``ImageFileNotFoundError`` (a ``FileNotFoundError`` and a ``ValueError``), each naming the argument.
"""

from __future__ import annotations

import base64
import errno
import io
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from PIL import Image as PILImage
    from typing_extensions import TypeAlias

ImageInput: TypeAlias = (
    "str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes] | npt.NDArray[np.uint8] "
    "| PILImage.Image"
)
ImagesInput: TypeAlias = "ImageInput | Iterable[ImageInput]"

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png", "png"),
    (b"\xff\xd8\xff", "image/jpeg", "jpg"),
    (b"GIF87a", "image/gif", "gif"),
    (b"GIF89a", "image/gif", "gif"),
    (b"BM", "image/bmp", "bmp"),
    (b"II*\x00", "image/tiff", "tif"),
    (b"MM\x00*", "image/tiff", "tif"),
)


class ImageFileNotFoundError(FileNotFoundError, ValueError):
    """A path given as an image is not a file (caught by ``except FileNotFoundError`` and by
    ``except ValueError``)."""


@dataclass(frozen=True)
class ImageFile:
    """One image as uploaded: a file name, the file's bytes and their content type."""

    name: str
    data: bytes
    content_type: str

    def base64(self) -> str:
        """The bytes in base64, as the JSON routes (``/v1/explain``, ``/v1/compare``) take them."""
        return base64.b64encode(self.data).decode("ascii")


@dataclass(frozen=True)
class ProbeImage:
    """An image of one of the gateway's probe sets (``GET /v1/probe-sets``), by id: ``explain()`` of it
    brings the image's scene graph, so the answer has the grounding score."""

    probe_set: str
    image_id: int


def image_file(image: Any, label: str = "image", index: int = 0) -> ImageFile:
    """``image`` (see the module) as an ``ImageFile``; errors name ``label``."""
    if isinstance(image, str):
        if image.startswith(("http://", "https://")):
            raise ValueError(
                f"{label} is a URL ({_short(image)}); the client uploads image files: "
                "download it first (e.g. httpx.get(url).content)"
            )
        return _file(_read_path(image, label), Path(image).name)
    if isinstance(image, os.PathLike):
        return _file(_read_path(image, label), Path(image).name)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _file(_nonempty(bytes(image), label), f"image{index}")
    if _is_pil(image):
        return ImageFile(f"image{index}.png", _png(image), "image/png")
    if _is_array(image):
        return ImageFile(f"image{index}.png", _png(_array_image(image, label)), "image/png")
    if callable(getattr(image, "read", None)):
        text_mode = f"{label} is a file opened in text mode: open it with mode 'rb'"
        if isinstance(image, io.TextIOBase):
            raise TypeError(text_mode)
        data = image.read()
        if isinstance(data, str):
            raise TypeError(text_mode)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{label}.read() gave {type(data).__name__}, not bytes")
        name = getattr(image, "name", None)
        return _file(_nonempty(bytes(data), label), Path(name).name if isinstance(name, str) else "")
    raise TypeError(
        f"{label}: a {type(image).__name__} is not an image; give a path (str or Path), bytes, a binary "
        "file object, a NumPy uint8 array [H, W, 3] or a PIL image"
    )


def image_files(images: Any, label: str = "images") -> list[ImageFile]:
    """One image or several (a list or tuple, or an array ``[N, H, W, 3]``) as ``ImageFile`` s; errors
    name ``label`` or ``label[i]``; no image at all is a ``ValueError``."""
    if is_one_image(images):
        return [image_file(images, label)]
    if _is_array(images):  # a batch [N, H, W, C]
        images = list(_as_array(images))
    elif isinstance(images, Iterable) and not isinstance(images, dict):
        images = list(images)
    else:
        raise TypeError(
            f"{label}: a {type(images).__name__} is neither an image nor a list of images (a path, bytes, "
            "a binary file object, a NumPy uint8 array or a PIL image)"
        )
    if not images:
        raise ValueError(f"{label} is empty: give at least one image")
    return [image_file(image, f"{label}[{i}]", i) for i, image in enumerate(images)]


def is_one_image(image: Any) -> bool:
    """Whether ``image`` is one image rather than a collection of them."""
    if isinstance(image, (str, bytes, bytearray, memoryview, os.PathLike)) or _is_pil(image):
        return True
    if _is_array(image):
        return bool(_as_array(image).ndim != 4)
    return callable(getattr(image, "read", None))


# -- the parts ---------------------------------------------------------------------------------------


def _read_path(path: str | os.PathLike[str], label: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ImageFileNotFoundError(
            errno.ENOENT,
            f"{label}: no such file {_short(os.fspath(path))} (a str image is the path of an image file; "
            "give bytes for an image's contents)",
            os.fspath(path),
        ) from None
    except IsADirectoryError:
        raise ValueError(f"{label}: {_short(os.fspath(path))} is a directory, not an image file") from None
    except OSError as exc:  # e.g. a name too long: a str that is not a path
        raise ValueError(f"{label}: cannot read {_short(os.fspath(path))} ({exc.strerror or exc})") from None
    return _nonempty(data, label)


def _nonempty(data: bytes, label: str) -> bytes:
    if not data:
        raise ValueError(f"{label} is empty (0 bytes)")
    return data


def _file(data: bytes, name: str) -> ImageFile:
    content_type, ext = "application/octet-stream", ""
    for magic, kind, suffix in _MAGIC:
        if data.startswith(magic):
            content_type, ext = kind, suffix
            break
    else:
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            content_type, ext = "image/webp", "webp"
    return ImageFile(name or (f"image.{ext}" if ext else "image"), data, content_type)


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _is_pil(image: Any) -> bool:
    module = sys.modules.get("PIL.Image")
    return module is not None and isinstance(image, module.Image)


def _is_array(image: Any) -> bool:
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(image, numpy.ndarray):
        return True
    return hasattr(image, "__array__") and not _is_pil(image)


def _as_array(image: Any) -> Any:
    import numpy as np

    return np.asarray(image)


def _array_image(image: Any, label: str) -> PILImage.Image:
    import numpy as np
    from PIL import Image

    array = np.asarray(image)
    if array.dtype != np.uint8:
        hint = " (values in [0, 1]: (x * 255).round().astype(np.uint8))" if array.dtype.kind == "f" else ""
        raise ValueError(f"{label}: a {array.dtype} array; images are uint8 [H, W, 3]{hint}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[..., 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        hint = (
            " (channels first? x.transpose(1, 2, 0))"
            if array.ndim == 3 and array.shape[0] in (1, 3, 4)
            else ""
        )
        raise ValueError(
            f"{label}: an array of shape {list(array.shape)}; images are [H, W, 3] (RGB), [H, W, 4] "
            f"(RGBA) or [H, W] (grey){hint}"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{label}: an empty image (shape {list(array.shape)})")
    return Image.fromarray(np.ascontiguousarray(array))


def _png(image: PILImage.Image) -> bytes:
    if image.mode not in {"1", "L", "LA", "P", "RGB", "RGBA"}:
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


__all__ = [
    "ImageFile",
    "ImageFileNotFoundError",
    "ImageInput",
    "ImagesInput",
    "ProbeImage",
    "image_file",
    "image_files",
    "is_one_image",
]
