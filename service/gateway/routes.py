"""The gateway's own routes: captions, models, hooks, health and metrics. Thin: parse the request,
call the engine, shape the response (with the original captions of a hook that asks for them,
``service.gateway.original``)."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, BackgroundTasks, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.api.auth import CaptionAccess, CaptionAccessDep
from service.api.deps import RuntimeDep
from service.api.disconnect import ClientDisconnected, unless_disconnected
from service.api.errors import ApiError
from service.api.parsing import read_caption_request
from service.api.requestlog import annotate
from service.api.schemas import (
    CaptionOptions,
    CaptionResponse,
    ErrorResponse,
    HealthResponse,
    HooksResponse,
    ReadyResponse,
)
from service.api.uploads import decode_uploads
from service.backends.device import summary as device_summary
from service.engine.deadlines import base_deadline_s, deadline_reason, request_deadline_s
from service.engine.engine import Caption, CaptionOutput
from service.engine.hooks import hook_catalog
from service.gateway.openapi import caption_operation
from service.gateway.original import caption_with_original, resolve_with_original
from service.gateway.shape import ModelsListing, caption_response, models_response
from service.images.decode import check_uploads

router = APIRouter()

_CAPTION_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "bad image, JSON or multipart body; JSON nested too deeply",
        401: "COMPCAP_CAPTIONS_REQUIRE_KEY is set and no 'Authorization: Bearer <key>' was sent",
        403: "COMPCAP_CAPTIONS_REQUIRE_KEY is set and the key is not valid",
        404: "unknown model or ranker",
        413: "image, body, form field or JSON over its limit (a fetched image URL's too)",
        414: "query string over its limit",
        415: "not multipart/form-data, application/json, image/* or application/octet-stream",
        422: "invalid option, hook or parameter; no image or too many; an image URL refused "
        "(image_url_<reason>: off, scheme, host, address, dns, redirect, status, not_an_image, timeout, "
        "unreachable, invalid)",
        499: "the client closed the connection",
        502: "the model backend failed",
        503: "models not loaded yet, or the queue is full (Retry-After)",
        504: "the request passed its deadline",
    }.items()
}


@router.post(
    "/v1/captions",
    tags=["captions"],
    response_model=CaptionResponse,
    responses=_CAPTION_ERRORS,
    openapi_extra=caption_operation(),
    summary="Caption images (multipart `image`, repeatable; JSON `images`: base64 or allowed http(s) URLs; "
    "a raw image body)",
    description=inspect.cleandoc(CaptionOptions.__doc__ or ""),  # Markdown: no indented line
)
async def captions(request: Request, access: CaptionAccessDep, background: BackgroundTasks) -> Response:
    """The answer is a ``CaptionResponse``, validated once as it is built and written by pydantic's JSON
    encoder: not validated again and walked by ``jsonable_encoder`` as a returned model would be (about
    95 against 13 µs per answer); ``response_model`` documents it."""
    start = time.perf_counter()
    settings = access.runtime.settings
    try:  # its model is not known yet: the base deadline
        async with asyncio.timeout(base_deadline_s(settings)):
            blobs, options = await read_caption_request(request, settings, access.runtime.image_urls)
    except TimeoutError:
        raise deadline_exceeded(settings, None) from None
    images, decoded, out, original = await caption_blobs(request, access, blobs, options, start)
    for listener in access.runtime.after_caption:  # e.g. the shadow comparison, once the response is out
        background.add_task(listener, access.engine, images, out)
    answer = caption_response(out, original, (decoded - start) * 1e3, (time.perf_counter() - start) * 1e3)
    return Response(answer.model_dump_json(), media_type="application/json")


async def caption_blobs(
    request: Request, access: CaptionAccess, blobs: list[bytes], options: CaptionOptions, start: float
) -> tuple[np.ndarray, float, CaptionOutput, list[list[Caption]] | None]:
    """Caption the encoded images ``blobs`` with ``options`` (what every caption route does once it has
    read its body): resolved, checked, decoded off the loop, captioned (with the original captions of a
    hook that asks for them) within what is left of its captioner's request deadline since ``start``
    (``service.engine.deadlines``); a caller who leaves stops the work (499). (images, when they were
    decoded, the output, the original captions)."""
    runtime, engine = access.runtime, access.engine
    settings = runtime.settings
    params, original_params = resolve_with_original(engine, options.engine_kwargs())
    annotate(model=params.model, ranker=params.ranker, beam_size=params.beam_size, images=len(blobs))
    captioner = engine.manifest.captioner(params.model)
    deadline = request_deadline_s(settings, captioner)
    try:
        async with asyncio.timeout(max(deadline - (time.perf_counter() - start), 0.001)):
            check_uploads(blobs, max_bytes=settings.max_upload_bytes)  # junk costs no thread hop

            async def decode_and_caption() -> tuple[
                np.ndarray, float, CaptionOutput, list[list[Caption]] | None
            ]:
                images = await decode_uploads(blobs, runtime.manifest.image, settings)
                decoded = time.perf_counter()
                remaining = deadline - (decoded - start)
                out, original = await caption_with_original(
                    engine, images, params, original_params, max(remaining, 0.001)
                )
                return images, decoded, out, original

            # a caller that leaves stops the work at once: before its images are decoded, while it
            # waits for admission, or at the next decoding step
            return await unless_disconnected(request, decode_and_caption())
    except ClientDisconnected:
        raise ApiError(499, "client_disconnected", "the client closed the connection") from None
    except TimeoutError:
        raise deadline_exceeded(settings, captioner) from None


def deadline_exceeded(settings: Any, captioner: Any) -> ApiError:
    """The 504 of a request to ``captioner`` (None: not known yet) past its deadline, saying which
    deadline it was and what sets another."""
    deadline = request_deadline_s(settings, captioner)
    return ApiError(
        504,
        "deadline_exceeded",
        f"the request took longer than {deadline:g} s ({deadline_reason(settings, captioner)})",
    )


@router.get("/v1/models", tags=["models"], response_model=ModelsListing)
async def models(runtime: RuntimeDep) -> ModelsListing:
    """The captioners and rankers this deployment serves, with what each was trained on, the images
    each reads and whether its captions flag images unlike those it was made for."""
    return models_response(runtime.manifest, runtime.settings.precision, runtime.devices)


@router.get("/v1/hooks", tags=["models"], response_model=HooksResponse)
async def hooks() -> HooksResponse:
    """The decoding hooks a request may name in ``hooks``, with their parameters."""
    return HooksResponse.model_validate({"hooks": hook_catalog()})


@router.get("/healthz", tags=["health"], response_model=HealthResponse)
async def healthz(runtime: RuntimeDep) -> HealthResponse:
    """Alive: the process answers; with the device its models run on once they are loaded."""
    return HealthResponse(device=device_summary(runtime.devices))


@router.get(
    "/readyz",
    tags=["health"],
    response_model=ReadyResponse,
    response_model_exclude_none=True,
    responses={503: {"model": ReadyResponse, "description": "models still loading, or failed to load"}},
)
async def readyz(runtime: RuntimeDep, response: Response) -> ReadyResponse:
    """Ready once the models are loaded (503 until then)."""
    if runtime.ready:
        return ReadyResponse(status="ready", backend=runtime.settings.backend)
    response.status_code = 503
    return ReadyResponse(status="failed" if runtime.load_error else "loading", error=runtime.load_error)


@router.get("/metrics", include_in_schema=False)
async def metrics(runtime: RuntimeDep) -> Response:
    return Response(runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
