"""The Hugging Face inference task ``image-to-text`` at the gateway's root, so that the clients people
already have work: ``huggingface_hub.InferenceClient(model="http://host:8080").image_to_text(path)``
posts the image's raw bytes to ``POST /`` and reads ``[{"generated_text": ...}]``.

The body is the image's bytes (any ``image/*`` type, ``application/octet-stream`` or none), or the
task's JSON ``{"inputs": <base64 image or image URL>, "parameters": {...}}`` (a URL is fetched under
the operator's policy, as in ``POST /v1/captions``; ``InferenceClient`` itself downloads a URL it is
given and posts the bytes). Generation parameters map onto
CompCap's options where they mean the same: ``num_beams`` → ``beam_size``, ``max_new_tokens`` /
``max_length`` → ``max_length`` (words), ``min_new_tokens`` / ``min_length`` → the ``min_length``
hook, ``num_beam_groups`` and ``diversity_penalty`` → the ``diverse_beam`` hook,
``length_penalty``, ``num_return_sequences`` → ``n_best``; ``early_stopping`` is accepted as a
no-op (CompCap's search stops by its own rule). Sampling and the rest (``do_sample``, ``temperature``,
``top_k``, ``top_p``, …) are refused by name: CompCap decodes by beam search. The same options, limits
and errors as ``POST /v1/captions``; the answer is one ``generated_text`` per returned caption."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request, Response
from pydantic import BaseModel

from service.api.auth import CaptionAccessDep
from service.api.errors import ApiError, validate
from service.api.parsing import image_blobs, is_raw_image, read_raw_image, request_parts
from service.api.schemas import CaptionOptions
from service.gateway.routes import caption_blobs

router = APIRouter()


class GeneratedText(BaseModel):
    """One returned caption, as the Hugging Face image-to-text task writes it."""

    generated_text: str


DIRECT = {"num_beams": "beam_size", "length_penalty": "length_penalty", "num_return_sequences": "n_best"}
LENGTH = ("max_new_tokens", "max_length")
MINIMUM = ("min_new_tokens", "min_length")
IGNORED = ("early_stopping",)


def hf_options(parameters: Any) -> dict[str, Any]:
    """The task's ``parameters`` (with or without ``generation_parameters``) as CompCap's caption
    options; a parameter CompCap has no counterpart for is a 422 naming it."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise ApiError(422, "validation_error", "parameters must be an object", field="parameters")
    flat = {k: v for k, v in parameters.items() if k != "generation_parameters"}
    nested = parameters.get("generation_parameters") or {}
    if not isinstance(nested, dict):
        raise ApiError(422, "validation_error", "generation_parameters must be an object", field="parameters")
    given = {**nested, **flat}
    options: dict[str, Any] = {}
    hooks: list[dict[str, Any]] = []
    for name, value in given.items():
        if value is None or name in IGNORED:
            continue
        if name in DIRECT:
            options[DIRECT[name]] = value
        elif name in LENGTH:
            options["max_length"] = value
        elif name in MINIMUM:
            hooks.append({"name": "min_length", "params": {"min_words": value}})
        elif name in ("num_beam_groups", "diversity_penalty"):
            continue  # one diverse_beam hook below
        else:
            raise ApiError(
                422,
                "unsupported_parameter",
                f"parameters.{name}: CompCap decodes by beam search and has no {name!r} (it takes "
                f"{', '.join([*DIRECT, *LENGTH, *MINIMUM, 'num_beam_groups', 'diversity_penalty'])})",
                field=f"parameters.{name}",
            )
    if given.get("num_beam_groups") is not None:
        diverse: dict[str, Any] = {"groups": given["num_beam_groups"]}
        if given.get("diversity_penalty") is not None:
            diverse["diversity_penalty"] = given["diversity_penalty"]
        hooks.append({"name": "diverse_beam", "params": diverse})
    if hooks:
        options["hooks"] = hooks
    if "beam_size" in options and "n_best" not in options:
        options["n_best"] = 1  # generate() returns one sequence unless asked for more
    return options


@router.post(
    "/",
    tags=["captions"],
    summary="Hugging Face image-to-text task: raw image bytes, or {inputs, parameters}",
    response_model=list[GeneratedText],
    description=(__doc__ or "").split("\n\n", 1)[-1],  # the module's second paragraph: what a user sends
)
async def image_to_text(request: Request, access: CaptionAccessDep, background: BackgroundTasks) -> Response:
    """``[{"generated_text": caption}, ...]`` (see module docstring)."""
    start = time.perf_counter()
    settings = access.runtime.settings
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if is_raw_image(content_type) or not content_type:
        blobs = [await read_raw_image(request, settings)]
        options = validate(CaptionOptions, {"n_best": 1, **dict(request.query_params)})
    else:
        async with request_parts(request, settings, 1) as parts:
            if parts.form or parts.fields is None:
                raise ApiError(
                    415 if parts.form else 422,
                    "unsupported_media_type" if parts.form else "validation_error",
                    'send the image\'s bytes, or JSON {"inputs": <base64 image or URL>, "parameters": {...}}',
                    field="inputs",
                )
            payload = parts.fields
        inputs = payload.get("inputs")
        if not isinstance(inputs, str) or not inputs:
            raise ApiError(
                422, "no_image", "inputs must be the image in base64, or an image URL", field="inputs"
            )
        unknown = set(payload) - {"inputs", "parameters"}
        if unknown:
            raise ApiError(
                422, "validation_error", f"unknown fields {sorted(unknown)}", field=sorted(unknown)[0]
            )
        blobs = await image_blobs([(inputs, "inputs")], settings, access.runtime.image_urls)
        mapped = hf_options(payload.get("parameters"))
        options = validate(CaptionOptions, {"n_best": 1, **mapped})
    images, _, out, _ = await caption_blobs(request, access, blobs, options, start)
    for listener in access.runtime.after_caption:
        background.add_task(listener, access.engine, images, out)
    body = [{"generated_text": caption.text} for caption in out.results[0]]
    return Response(json.dumps(body), media_type="application/json")


__all__ = ["hf_options", "router"]
