"""Parsing of request bodies that carry images, in either form every such route takes: a multipart
upload (``image`` file parts, the other fields as form fields) or JSON with base64 images. Every part
is bounded (``limits``); errors raise ``ApiError``/``ImageError`` (or the kit's ``InvalidRequest``)
naming the problem; no input raises anything else.

- ``request_parts``: the one reader of both forms (content type, size bound, JSON scan, multipart
  parser bounds, upload sizes), for every route.
- ``read_caption_request``: ``POST /v1/captions``, options also from the query string (a body field
  wins over the same query parameter).
- ``UploadBody`` (``service.api.bodies``) builds the other routes' bodies on ``request_parts``."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from service.api.errors import ApiError, validate
from service.api.image_url import ImageURLFetcher, ImageURLPolicy
from service.api.limits import (
    MAX_FORM_FIELD_BYTES,
    MAX_FORM_FIELDS,
    bounded_stream,
    check_field_names,
    check_json,
)
from service.api.multipart import MAX_BODY, plain_form
from service.api.schemas import CaptionJSONRequest, CaptionOptions
from service.api.settings import ServiceSettings
from service.engine.deadlines import base_deadline_s
from service.images.decode import ImageError
from service.images.url_policy import is_url

FILE_FIELD = "image"  # the multipart file part of every route that takes images


def body_limit(settings: ServiceSettings) -> int:
    """The largest body: every image at the upload limit, base64-encoded, plus 1 MiB of options."""
    return settings.max_upload_bytes * settings.max_images_per_request * 4 // 3 + (1 << 20)


@dataclass
class RequestParts:
    """A request body read: ``fields`` — the JSON object (None for an empty body or one that is not
    an object) or the form's text fields (strings) — and the form's ``image`` uploads (JSON: none)."""

    form: bool
    fields: dict[str, Any] | None
    uploads: list[UploadFile] = field(default_factory=list)
    max_upload_bytes: int = 0

    async def images(self) -> list[bytes]:
        """The uploads' bytes, in order; 413 ``image_too_large`` for one over the upload limit."""
        blobs = []
        for index, upload in enumerate(self.uploads):
            data = await upload.read(self.max_upload_bytes + 1)
            if len(data) > self.max_upload_bytes:
                raise ImageError(
                    "image_too_large",
                    f"image {index} is larger than the limit of {self.max_upload_bytes} bytes",
                    status=413,
                )
            blobs.append(data)
        return blobs


@asynccontextmanager
async def request_parts(
    request: Request, settings: ServiceSettings, max_files: int
) -> AsyncIterator[RequestParts]:
    """Read ``request``'s body, multipart or JSON (415 otherwise), within ``body_limit``; the uploads
    are open inside the block. ``max_files``: the most file parts the multipart parser takes."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    limit = body_limit(settings)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            413, "request_too_large", f"the request body is {declared} bytes; the limit is {limit}"
        )
    if content_type not in ("multipart/form-data", "application/json", ""):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"content type {content_type!r}: use multipart/form-data or application/json (captions also "
            "take a raw image body: image/* or application/octet-stream)",
        )
    form = content_type == "multipart/form-data"
    items: list[tuple[str, UploadFile | str]] = []
    payload: Any = None
    try:
        async with aclosing(bounded_stream(request.stream(), limit, base_deadline_s(settings))) as stream:
            if form and declared is not None and declared.isdigit() and int(declared) <= MAX_BODY:
                items = await _read_form(request, stream, max_files, settings)
            elif form:
                items = await _parse_multipart(request, stream, max_files, settings)
            else:
                body = b"".join([chunk async for chunk in stream])
                payload = _loads(body) if body else None
    except RecursionError:  # the bounds make this unreachable; if not, it is still the client's 400
        raise ApiError(400, "too_deep", "the request is nested too deeply to parse") from None
    try:
        yield (
            _form_parts(items, settings)
            if form
            else RequestParts(False, payload if isinstance(payload, dict) else None)
        )
    finally:
        for _, value in items:
            if isinstance(value, UploadFile):
                await value.close()


def is_raw_image(content_type: str) -> bool:
    """A body that is one image's bytes (``curl --data-binary @img.png -H 'content-type: image/png'``)."""
    return content_type.startswith("image/") or content_type == "application/octet-stream"


async def read_raw_image(request: Request, settings: ServiceSettings) -> bytes:
    """The body as one image's bytes, within ``max_upload_bytes`` (413) and the request deadline between
    its parts (408); an empty body is a 422 ``no_image``."""
    limit = settings.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "request_too_large", f"the image is {declared} bytes; the limit is {limit}")
    async with aclosing(bounded_stream(request.stream(), limit, base_deadline_s(settings))) as stream:
        body = b"".join([chunk async for chunk in stream])
    if not body:
        raise ApiError(422, "no_image", "the request body is empty: send the image's bytes", field="image")
    return body


async def read_caption_request(
    request: Request, settings: ServiceSettings, urls: ImageURLFetcher | None = None
) -> tuple[list[bytes], CaptionOptions]:
    """The images and options of a caption request: multipart uploads, JSON with base64 images or
    image URLs (fetched by ``urls``), or a raw image body (``image/*`` or ``application/octet-stream``)
    with the options in the query."""
    query: dict[str, Any] = dict(request.query_params)  # bounded by QueryLimitMiddleware
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if is_raw_image(content_type):
        blob = await read_raw_image(request, settings)
        return [blob], validate(CaptionOptions, query)
    async with request_parts(request, settings, 4 * settings.max_images_per_request + 8) as parts:
        if parts.form:
            check_count(len(parts.uploads), settings.max_images_per_request)
            options = validate(CaptionOptions, {**query, **(parts.fields or {})})
            return await parts.images(), options
    return await _read_json(parts.fields, query, settings, urls)


async def _read_json(
    payload: dict[str, Any] | None,
    query: dict[str, Any],
    settings: ServiceSettings,
    urls: ImageURLFetcher | None,
) -> tuple[list[bytes], CaptionOptions]:
    if payload is None:
        raise ApiError(
            422, "no_image", "no image: send multipart field 'image' or a JSON object with 'images'"
        )
    if "images" in payload and isinstance(payload["images"], list):
        check_count(len(payload["images"]), settings.max_images_per_request, field="images")
    req = validate(CaptionJSONRequest, {**query, **payload})
    check_count(len(req.images), settings.max_images_per_request, field="images")
    blobs = await image_blobs([(text, f"images.{i}") for i, text in enumerate(req.images)], settings, urls)
    return blobs, CaptionOptions.model_validate(req.model_dump(exclude={"images"}))


async def image_blobs(
    items: list[tuple[str, str]], settings: ServiceSettings, urls: ImageURLFetcher | None
) -> list[bytes]:
    """JSON images, each (text, its field): base64 (data: URLs accepted) or an image URL, fetched by
    ``urls`` under the operator's policy (``service.api.image_url``; none: URLs are refused)."""
    blobs = [
        None if is_url(text) else b64_blob(text, label, settings.max_upload_bytes) for text, label in items
    ]
    found = [item for item, blob in zip(items, blobs, strict=True) if blob is None]
    if not found:
        return [blob for blob in blobs if blob is not None]
    fetched = iter(await (urls or ImageURLFetcher(ImageURLPolicy())).fetch_all(found))
    return [blob if blob is not None else next(fetched) for blob in blobs]


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


async def _read_form(
    request: Request, stream: AsyncGenerator[bytes, None], max_files: int, settings: ServiceSettings
) -> list[tuple[str, UploadFile | str]]:
    """A small form read whole: the one-pass reader, or the streaming parser on the same bytes for
    anything the one-pass reader leaves to it (``service.api.multipart``)."""
    body = b"".join([chunk async for chunk in stream])
    items = plain_form(
        body, request.headers.get("content-type", ""), max_files, MAX_FORM_FIELDS, MAX_FORM_FIELD_BYTES
    )
    if items is not None:
        return items

    async def again() -> AsyncGenerator[bytes, None]:
        yield body

    return await _parse_multipart(request, again(), max_files, settings)


async def _parse_multipart(
    request: Request, stream: AsyncGenerator[bytes, None], max_files: int, settings: ServiceSettings
) -> list[tuple[str, UploadFile | str]]:
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
    return form.multi_items()


def _multipart_error(message: str, max_files: int, settings: ServiceSettings) -> ApiError:
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


def _form_parts(items: list[tuple[str, UploadFile | str]], settings: ServiceSettings) -> RequestParts:
    check_field_names((key for key, _ in items), "form")
    uploads: list[UploadFile] = []
    fields: dict[str, Any] = {}
    for key, value in items:
        if key == FILE_FIELD:
            if not isinstance(value, UploadFile):
                raise ApiError(
                    422,
                    "validation_error",
                    f"{FILE_FIELD} must be a file upload, not a text field",
                    field=FILE_FIELD,
                )
            uploads.append(value)
        else:
            fields[key] = value if isinstance(value, str) else f"<file {value.filename}>"
    return RequestParts(True, fields, uploads, settings.max_upload_bytes)


def check_count(n: int, most: int, least: int = 1, field: str = FILE_FIELD) -> None:
    """422 ``no_image`` for fewer than ``least`` images, ``too_many_images`` for more than ``most``."""
    if n < least:
        raise ApiError(
            422, "no_image", "no image: send multipart field 'image' or JSON 'images'", field=field
        )
    if n > most:
        raise ApiError(422, "too_many_images", f"{n} images; at most {most} per request", field=field)


def b64_blob(text: str, label: str, max_bytes: int) -> bytes:
    """A JSON image (base64, data: URLs accepted) as bytes; errors name it by ``label`` (its field
    path, e.g. ``images.0``)."""
    if is_url(text):
        raise ApiError(
            422,
            "image_url_unsupported",
            f"{label} is a URL; this route takes the image itself (base64 or multipart); image URLs are "
            "taken by POST /v1/captions and POST /",
            field=label,
        )
    if text.startswith("data:"):
        text = text.partition(",")[2]
    if len(text) > max_bytes * 4 // 3 + 8:
        raise ImageError("image_too_large", f"{label} is larger than {max_bytes} bytes", status=413)
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_base64", f"{label} is not valid base64", field=label) from None
