"""Parsing of ``POST /v1/captions`` bodies: multipart uploads or JSON with base64 images, options from
the query string and the body, size and count limits. Raises ``ApiError``/``ImageError`` naming it."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from fastapi import Request
from starlette.datastructures import UploadFile

from service.api.errors import ApiError
from service.api.schemas import CaptionJSONRequest, CaptionOptions
from service.images import ImageError
from service.settings import Settings


async def read_caption_request(request: Request, settings: Settings) -> tuple[list[bytes], CaptionOptions]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query: dict[str, Any] = dict(request.query_params)
    limit = settings.max_upload_bytes * settings.max_images_per_request * 4 // 3 + (1 << 20)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            413, "request_too_large", f"the request body is {declared} bytes; the limit is {limit}"
        )

    if content_type == "multipart/form-data":
        form = await request.form(max_files=4 * settings.max_images_per_request + 8, max_fields=64)
        try:
            return await _read_form(form.multi_items(), query, settings)
        finally:
            await form.close()

    if content_type in ("application/json", ""):
        body = await request.body()
        if len(body) > limit:
            raise ApiError(413, "request_too_large", f"the request body is over {limit} bytes")
        try:
            payload = json.loads(body) if body else None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise ApiError(
                422, "no_image", "no image: send multipart field 'image' or a JSON object with 'images'"
            )
        if "images" in payload and isinstance(payload["images"], list):
            _check_count(len(payload["images"]), settings)
        req = CaptionJSONRequest.model_validate({**query, **payload})
        _check_count(len(req.images), settings)
        blobs = [_b64(text, index, settings.max_upload_bytes) for index, text in enumerate(req.images)]
        return blobs, CaptionOptions.model_validate(req.model_dump(exclude={"images"}))

    raise ApiError(
        415,
        "unsupported_media_type",
        f"content type {content_type!r}: use multipart/form-data or application/json",
    )


async def _read_form(
    items: list[tuple[str, UploadFile | str]], query: dict[str, Any], settings: Settings
) -> tuple[list[bytes], CaptionOptions]:
    files: list[UploadFile] = []
    fields: dict[str, Any] = {}
    for key, value in items:
        if key == "image":
            if not isinstance(value, UploadFile):
                raise ApiError(422, "validation_error", "image must be a file upload, not a text field")
            files.append(value)
        else:
            fields[key] = value if isinstance(value, str) else f"<file {value.filename}>"
    _check_count(len(files), settings)
    options = CaptionOptions.model_validate({**query, **fields})
    blobs = []
    for index, upload in enumerate(files):
        data = await upload.read(settings.max_upload_bytes + 1)
        if len(data) > settings.max_upload_bytes:
            raise ImageError(
                "image_too_large",
                f"image {index} is larger than the limit of {settings.max_upload_bytes} bytes",
                status=413,
            )
        blobs.append(data)
    return blobs, options


def _check_count(n: int, settings: Settings) -> None:
    if n == 0:
        raise ApiError(422, "no_image", "no image: send multipart field 'image' or JSON 'images'")
    if n > settings.max_images_per_request:
        raise ApiError(
            422, "too_many_images", f"{n} images; at most {settings.max_images_per_request} per request"
        )


def _b64(text: str, index: int, max_bytes: int) -> bytes:
    if text.startswith("data:"):
        text = text.partition(",")[2]
    if len(text) > max_bytes * 4 // 3 + 8:
        raise ImageError("image_too_large", f"images[{index}] is larger than {max_bytes} bytes", status=413)
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_base64", f"images[{index}] is not valid base64") from None
