"""HTTP routes. Thin: parse the request, call the engine, shape the response."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import UploadFile

from service.api.errors import ApiError
from service.api.schemas import (
    CaptionerInfo,
    CaptionJSONRequest,
    CaptionOptions,
    CaptionOut,
    CaptionResponse,
    ErrorResponse,
    ImageResult,
    ModelsResponse,
    RankerInfo,
    Timings,
)
from service.engine.captioning import CaptionEngine, CaptionOutput
from service.images import ImageError, decode_images
from service.settings import Settings

if TYPE_CHECKING:
    from service.api.app import Runtime

router = APIRouter()

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse} for s in (400, 404, 413, 415, 422, 503, 504)
}
_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "image": {"type": "array", "items": {"type": "string", "format": "binary"}}
                    },
                    "required": ["image"],
                }
            },
            "application/json": {"schema": CaptionJSONRequest.model_json_schema()},
        },
    }
}


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _engine(runtime: Runtime) -> CaptionEngine:
    if runtime.engine is None:
        raise ApiError(
            503,
            "not_ready",
            "models are still loading"
            if not runtime.load_error
            else f"models failed to load: {runtime.load_error}",
        )
    return runtime.engine


@router.post(
    "/v1/captions",
    response_model=CaptionResponse,
    responses=_ERRORS,
    openapi_extra=_BODY,
    summary="Caption images (multipart field `image`, repeatable, or JSON `images` in base64)",
    description=CaptionOptions.__doc__,
)
async def captions(request: Request) -> CaptionResponse:
    runtime = _runtime(request)
    engine = _engine(runtime)
    settings = runtime.settings
    start = time.perf_counter()
    try:
        async with asyncio.timeout(settings.request_deadline_s):
            blobs, options = await _read_request(request, settings)
            params = engine.resolve(**options.engine_kwargs())
            image = runtime.manifest.image
            images = await asyncio.to_thread(
                decode_images,
                blobs,
                image.height,
                image.width,
                max_bytes=settings.max_upload_bytes,
                max_pixels=settings.max_image_pixels,
            )
            decoded = time.perf_counter()
            out = await engine.caption(images, params)
    except TimeoutError:
        raise ApiError(
            504, "deadline_exceeded", f"the request took longer than {settings.request_deadline_s} s"
        ) from None
    return _response(out, (decoded - start) * 1e3, (time.perf_counter() - start) * 1e3)


async def _read_request(request: Request, settings: Settings) -> tuple[list[bytes], CaptionOptions]:
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


def _response(out: CaptionOutput, decode_images_ms: float, total_ms: float) -> CaptionResponse:
    p = out.params
    results = [
        ImageResult(
            index=i,
            caption=caps[0].text if caps else "",
            captions=[
                CaptionOut(
                    text=c.text,
                    tokens=c.tokens,
                    logprob=c.logprob,
                    normalized_logprob=c.normalized_logprob,
                    ranker_score=c.ranker_score,
                    beam_rank=c.beam_rank,
                )
                for c in caps
            ],
        )
        for i, caps in enumerate(out.results)
    ]
    t = out.timings_ms
    return CaptionResponse(
        model=p.captioner,
        ranker=p.ranker,
        beam_size=p.beam_size,
        n_best=p.n_best,
        max_length=p.max_length,
        length_penalty=p.length_penalty,
        results=results,
        timings_ms=Timings(
            decode_images=decode_images_ms,
            encode=t.get("encode", 0.0),
            decode=t.get("decode", 0.0),
            rerank=t.get("rerank", 0.0),
            total=total_ms,
        ),
    )


@router.get("/v1/models", response_model=ModelsResponse)
async def models(request: Request) -> ModelsResponse:
    m = _runtime(request).manifest
    return ModelsResponse(
        preset=m.preset,
        default_captioner=m.default_captioner,
        image={"height": m.image.height, "width": m.image.width},
        captioners=[
            CaptionerInfo(
                name=c.name,
                architecture=c.architecture,
                reads=c.reads,
                max_length=c.max_length,
                default_ranker=c.ranker,
                training=c.training,
                quality=c.quality,
            )
            for c in m.captioners
        ],
        rankers=[
            RankerInfo(
                name=r.name,
                architecture=r.architecture,
                embedding_dim=r.embedding_dim,
                joint_with=r.joint_with,
                training=r.training,
            )
            for r in m.rankers
        ],
    )


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "models not loaded yet"}})
async def readyz(request: Request) -> JSONResponse:
    runtime = _runtime(request)
    if runtime.ready:
        return JSONResponse({"status": "ready", "backend": runtime.settings.backend})
    status = "failed" if runtime.load_error else "loading"
    return JSONResponse({"status": status, "error": runtime.load_error}, status_code=503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(_runtime(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
