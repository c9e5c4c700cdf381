"""HTTP routes. Thin: parse the request, call the engine, shape the response."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.api.disconnect import ClientDisconnected, unless_disconnected
from service.api.errors import ApiError
from service.api.parsing import read_caption_request
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
from service.engine.captioning import Caption, CaptionEngine, CaptionOutput
from service.engine.hooks import hook_catalog
from service.images import decode_images

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
            blobs, options = await read_caption_request(request, settings)
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
            remaining = settings.request_deadline_s - (time.perf_counter() - start)
            out = await unless_disconnected(
                request, engine.caption(images, params, timeout_s=max(remaining, 0.001))
            )
    except ClientDisconnected:
        raise ApiError(499, "client_disconnected", "the client closed the connection") from None
    except TimeoutError:
        raise ApiError(
            504, "deadline_exceeded", f"the request took longer than {settings.request_deadline_s} s"
        ) from None
    return _response(out, (decoded - start) * 1e3, (time.perf_counter() - start) * 1e3)


def _captions(caps: list[Caption]) -> list[CaptionOut]:
    return [
        CaptionOut(
            text=c.text,
            tokens=c.tokens,
            logprob=c.logprob,
            normalized_logprob=c.normalized_logprob,
            ranker_score=c.ranker_score,
            beam_rank=c.beam_rank,
        )
        for c in caps
    ]


def _response(out: CaptionOutput, decode_images_ms: float, total_ms: float) -> CaptionResponse:
    p = out.params
    original = out.original
    results = [
        ImageResult(
            index=i,
            caption=caps[0].text if caps else "",
            captions=_captions(caps),
            original_caption=None if original is None else (original[i][0].text if original[i] else ""),
            original_captions=None if original is None else _captions(original[i]),
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
        rerank_weight=p.rerank_weight,
        hooks=p.hook_names,
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


@router.get("/v1/hooks")
async def hooks() -> dict[str, Any]:
    """The decoding hooks a request may name in ``hooks``, with their parameters."""
    return {"hooks": hook_catalog()}


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
