"""``POST /v1/compare`` (the same images captioned by two or more configurations, most discrepant
first) and ``GET /v1/compare/shadow`` (the live shadow comparison's reservoir). Thin: validate, decode
the images, hand to ``CompareService``. Key-protected when ``COMPCAP_API_KEYS`` is set."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from service.api.bodies import UPLOAD_ERRORS, UploadBody
from service.api.deps import EngineDep, RuntimeDep, from_state
from service.api.errors import ApiError
from service.api.feature import error_responses, feature_router
from service.api.requestlog import annotate
from service.api.schemas import MAX_IMAGE_CHARS, CaptionOptions
from service.api.uploads import decode_uploads
from service.compare.configs import NAME_PATTERN, Configuration, ConfigurationError
from service.compare.schemas import CompareResponse, ShadowResponse
from service.compare.service import CompareService
from service.compare.settings import CompareSettings
from service.compare.shadow import ShadowComparer


class ConfigurationSpec(CaptionOptions):
    """A captioner and its decoding options under a name (the caption options of POST /v1/captions)."""

    name: str = Field(pattern=NAME_PATTERN.pattern, description="unique name, e.g. BUTR+RR")
    model: str = Field(max_length=128, description="captioner name")


class CompareFields(BaseModel):
    """The configurations to compare (in a multipart request, a JSON array in a form field)."""

    model_config = ConfigDict(extra="forbid")
    configurations: list[ConfigurationSpec] = Field(
        min_length=2, description="two or more configurations (at most COMPCAP_MAX_COMPARE_CONFIGURATIONS)"
    )


class CompareRequest(CompareFields):
    """``POST /v1/compare`` as JSON: base64 images and the configurations."""

    images: list[Annotated[str, Field(max_length=MAX_IMAGE_CHARS)]] = Field(
        min_length=1, description="base64 images (at most COMPCAP_MAX_IMAGES_PER_REQUEST)"
    )


BODY = UploadBody(
    CompareFields,
    CompareRequest,
    image_field="images",
    many=True,
    least=1,
    description="the images as multipart file parts 'image' (repeated) with 'configurations' a JSON "
    "array in a form field, or JSON with base64 images",
)


CompareDep = Annotated[CompareService, Depends(from_state("compare"))]
router = feature_router("comparison")
_ERRORS = error_responses(
    "comparisons",
    {
        **UPLOAD_ERRORS,
        404: "unknown model or ranker in a configuration; no shadow configured",
        422: "fewer than two configurations, repeated names, invalid option, too many images",
        503: "models not loaded yet, or the decoding queue is full",
    },
)


def _configs(body: CompareFields, limit: int) -> list[Configuration]:
    if len(body.configurations) > limit:
        raise ApiError(
            422,
            "too_many_configurations",
            f"{len(body.configurations)} configurations; at most {limit}",
            field="configurations",
        )
    configs = []
    for i, c in enumerate(body.configurations):
        try:
            options = c.model_dump(exclude={"name"}, exclude_defaults=True) | {"model": c.model}
            configs.append(Configuration(c.name, options))
        except ConfigurationError as exc:
            raise ApiError(
                422, "invalid_configuration", str(exc), field=f"configurations.{i}.{exc.field}"
            ) from None
    return configs


@router.post("/v1/compare", responses=_ERRORS, response_model=CompareResponse, openapi_extra=BODY.operation())
async def compare(
    request: Request, runtime: RuntimeDep, engine: EngineDep, comparer: CompareDep
) -> dict[str, Any]:
    """Caption every image with every configuration (in the engine's shared batch, at background
    priority); per image each configuration's caption and the pairwise NGSM (Wan et al., 2022, Eq. 4),
    images most discrepant first. The images come as multipart file parts ``image`` (``configurations`` a
    JSON form field) or as base64 in JSON. See README, Comparison."""
    settings = runtime.settings
    body, blobs = await BODY.read(request, settings, most=settings.max_images_per_request)
    configs = _configs(body, CompareSettings.of(settings).max_compare_configurations)
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ApiError(
            422,
            "invalid_configuration",
            f"configuration names must be unique: {names}",
            field="configurations",
        )
    annotate(configurations=names, images=len(blobs))
    images = await decode_uploads(blobs, runtime.manifest.image, settings)
    return await comparer.compare(engine, images, configs)


@router.get(
    "/v1/compare/shadow",
    responses={404: {"description": "no shadow configured"}},
    response_model=ShadowResponse,
)
async def shadow(request: Request) -> dict[str, Any]:
    """The shadow comparison's reservoir: the most discrepant live images seen (lowest NGSM first), each
    with a thumbnail and both captions, within the configured size and byte bounds."""
    comparer: ShadowComparer | None = request.app.state.shadow
    if comparer is None:
        raise ApiError(404, "no_shadow", "no shadow configured: set COMPCAP_SHADOW_MODEL")
    return await comparer.snapshot()


__all__ = ["CompareFields", "CompareRequest", "router"]
