"""Parsing of ``POST /v1/captions`` bodies: multipart uploads or JSON with base64 images, options from
the query string and the body (a body field wins over the same query parameter), every part bounded
(``limits``). Raises ``ApiError``/``ImageError`` naming the problem; no input raises anything else."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from service.api.errors import ApiError
from service.api.limits import (
    MAX_FORM_FIELD_BYTES,
    MAX_FORM_FIELDS,
    bounded_stream,
    check_field_names,
    check_json,
)
from service.api.schemas import CaptionJSONRequest, CaptionOptions
from service.images import ImageError
from service.settings import Settings


def body_limit(settings: Settings) -> int:
    """The largest body: every image at the upload limit, base64-encoded, plus 1 MiB of options."""
    return settings.max_upload_bytes * settings.max_images_per_request * 4 // 3 + (1 << 20)


async def read_caption_request(request: Request, settings: Settings) -> tuple[list[bytes], CaptionOptions]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query: dict[str, Any] = dict(request.query_params)  # bounded by QueryLimitMiddleware
    limit = body_limit(settings)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            413, "request_too_large", f"the request body is {declared} bytes; the limit is {limit}"
        )
    try:
        if content_type == "multipart/form-data":
            async with aclosing(bounded_stream(request.stream(), limit)) as stream:
                return await _read_multipart(request, stream, query, settings)
        if content_type in ("application/json", ""):
            async with aclosing(bounded_stream(request.stream(), limit)) as stream:
                body = b"".join([chunk async for chunk in stream])
            return _read_json(body, query, settings)
    except RecursionError:  # the bounds make this unreachable; if not, it is still the client's 400
        raise ApiError(400, "too_deep", "the request is nested too deeply to parse") from None
    raise ApiError(
        415,
        "unsupported_media_type",
        f"content type {content_type!r}: use multipart/form-data or application/json",
    )


def _read_json(body: bytes, query: dict[str, Any], settings: Settings) -> tuple[list[bytes], CaptionOptions]:
    payload = _loads(body) if body else None
    if not isinstance(payload, dict):
        raise ApiError(
            422, "no_image", "no image: send multipart field 'image' or a JSON object with 'images'"
        )
    if "images" in payload and isinstance(payload["images"], list):
        _check_count(len(payload["images"]), settings)
    req = CaptionJSONRequest.model_validate({**query, **payload})
    _check_count(len(req.images), settings)
    blobs = [b64_blob(text, index, settings.max_upload_bytes) for index, text in enumerate(req.images)]
    return blobs, CaptionOptions.model_validate(req.model_dump(exclude={"images"}))


def _loads(body: bytes) -> Any:
    """``json.loads`` after the depth and size scan; every decoding failure is a 400 ``invalid_json``
    (a number of over 4300 digits is a ``ValueError`` that is not a ``JSONDecodeError``)."""
    try:
        encoding = json.detect_encoding(body)
        if encoding not in ("utf-8", "utf-8-sig"):  # the scan reads UTF-8; RFC 8259 allows no other
            body = body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        check_json(body)
        return json.loads(body)
    except (ValueError, UnicodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None


async def _read_multipart(
    request: Request, stream: AsyncGenerator[bytes, None], query: dict[str, Any], settings: Settings
) -> tuple[list[bytes], CaptionOptions]:
    max_files = 4 * settings.max_images_per_request + 8
    parser = MultiPartParser(
        request.headers,
        stream,
        max_files=max_files,
        max_fields=MAX_FORM_FIELDS,
        max_part_size=MAX_FORM_FIELD_BYTES,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise _multipart_error(exc.message, max_files, settings) from None
    try:
        return await _read_form(form.multi_items(), query, settings)
    finally:
        await form.close()


def _multipart_error(message: str, max_files: int, settings: Settings) -> ApiError:
    if message.startswith("Too many fields"):
        return ApiError(413, "too_many_form_fields", f"more than the limit of {MAX_FORM_FIELDS} form fields")
    if message.startswith("Part exceeded maximum size"):
        return ApiError(
            413, "form_field_too_large", f"a form field is over the limit of {MAX_FORM_FIELD_BYTES} bytes"
        )
    if message.startswith("Too many files"):
        return ApiError(
            422,
            "too_many_images",
            f"more than {max_files} files; at most {settings.max_images_per_request} images per request",
        )
    return ApiError(400, "invalid_multipart", f"the multipart body cannot be parsed: {message}")


async def _read_form(
    items: list[tuple[str, UploadFile | str]], query: dict[str, Any], settings: Settings
) -> tuple[list[bytes], CaptionOptions]:
    check_field_names((key for key, _ in items), "form")
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


def b64_blob(text: str, index: int, max_bytes: int) -> bytes:
    if text.startswith("data:"):
        text = text.partition(",")[2]
    if len(text) > max_bytes * 4 // 3 + 8:
        raise ImageError("image_too_large", f"images[{index}] is larger than {max_bytes} bytes", status=413)
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_base64", f"images[{index}] is not valid base64") from None
