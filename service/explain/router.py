"""``POST /v1/explain``: thin — validate, decode the image, hand to ``ExplainService``, return its
result. Key-protected when ``COMPCAP_API_KEYS`` is set (as the probes)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.api.bodies import UPLOAD_ERRORS, UploadBody
from service.api.deps import EngineDep, RuntimeDep, from_state
from service.api.errors import ApiError
from service.api.feature import error_responses, feature_router
from service.api.requestlog import annotate
from service.api.schemas import MAX_IMAGE_CHARS, CaptionOptions
from service.explain.scene import scaled_scene
from service.explain.schemas import ExplainResponse
from service.explain.service import METHODS, ExplainInput, ExplainService
from service.images.decode import decode_image, upright_size
from service.text.suggest import did_you_mean

MAX_SCENE_OBJECTS = 64
MAX_TOKENS = 512


class ImageRef(BaseModel):
    """An image of one of the repository's probe sets: its scene graph comes with it."""

    model_config = ConfigDict(extra="forbid")
    probe_set: str = Field(max_length=128)
    image_id: int = Field(ge=0)


class SceneObject(BaseModel):
    """One object of a scene graph: what a word's most-attributed region may lie on."""

    model_config = ConfigDict(extra="ignore")
    id: int = Field(ge=0, description="the object's id (echoed in under_argmax)")
    noun: str = Field(min_length=1, max_length=64, description="its class, e.g. horse")
    bbox: tuple[float, float, float, float] = Field(
        description="[x0, y0, x1, y1] in pixels of the scene's size (x0 <= x1, y0 <= y1)"
    )
    prop: str | None = Field(default=None, max_length=64, description="what it holds: a second label")

    @model_validator(mode="after")
    def _ordered(self) -> SceneObject:
        x0, y0, x1, y1 = self.bbox
        if not (x0 <= x1 and y0 <= y1):
            raise ValueError(
                f"bbox must be [x0, y0, x1, y1] with x0 <= x1 and y0 <= y1, got {list(self.bbox)}"
            )
        return self


class SceneGraph(BaseModel):
    """The uploaded image's scene graph, in SceneWorld's form (``compcap-lab world`` writes them; other keys
    of its graphs, e.g. colour or relations, are ignored): with it an explanation has the grounding
    score and the pointing game, as a probe-set image (``image_ref``) has."""

    model_config = ConfigDict(extra="ignore")
    objects: list[SceneObject] = Field(max_length=MAX_SCENE_OBJECTS, description="in drawing order")
    background: str = Field(min_length=1, max_length=64, description="the class below the horizon: grass")
    horizon: float = Field(ge=0, description="the pixel row where the background starts (above: backdrop)")
    size: tuple[int, int] | None = Field(
        default=None,
        description="[height, width] the boxes are in (default: the uploaded image's own size); they are "
        "scaled to the size the model reads",
    )

    @field_validator("size")
    @classmethod
    def _positive(cls, size: tuple[int, int] | None) -> tuple[int, int] | None:
        if size is not None and min(size) < 1:
            raise ValueError(f"size must be [height, width] >= 1, got {list(size)}")
        return size


ONE_IMAGE = "give exactly one of image and image_ref"


class ExplainFields(CaptionOptions):
    """Explain a caption word by word: the image (``image``: a file part of a multipart request, or
    base64 in JSON) with its ``scene_graph`` if it has one, or ``image_ref`` (a probe-set image, which
    brings its scene graph); a scene graph gives the grounding score and the pointing game. ``caption``
    (text) or ``tokens`` (its token ids, as ``POST /v1/captions`` answers them) to explain the client's
    caption (teacher-forced) instead of the engine's best one (decoded with the options below)."""

    image_ref: ImageRef | None = None
    scene_graph: SceneGraph | None = Field(
        default=None, description="the uploaded image's scene graph (not with image_ref: it has its own)"
    )
    method: Literal["attention", "saliency", "guided_backprop", "integrated_gradients"] = Field(
        default="attention",
        description="attention: the step model's own (no torch); the others: Captum on the torch programs "
        "(the 'explain' extra; 501 without it)",
    )
    caption: str | None = Field(default=None, max_length=1000, description="caption to explain instead")
    tokens: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        max_length=MAX_TOKENS,
        description="the caption to explain as its token ids (a caption's tokens in POST /v1/captions' "
        "answer), not with caption: explained exactly as decoded, where a subword captioner's text "
        "might tokenize back to other tokens",
    )
    n_steps: int = Field(default=50, ge=1, description="integrated gradients' path steps (settings bound it)")
    attribute_to: Literal["regions", "pixels"] = Field(
        default="regions", description="gradient methods: the region features or the pixels"
    )
    overlays: bool = Field(default=True, description="include a PNG heat-map overlay per word")
    overlay_scale: int = Field(default=2, ge=1, le=8, description="overlay enlargement")


class ExplainRequest(ExplainFields):
    """``POST /v1/explain`` as JSON: ``image`` (base64) or ``image_ref``, and the options."""

    image: str | None = Field(default=None, max_length=MAX_IMAGE_CHARS, description="base64 image")

    @model_validator(mode="after")
    def _one_image(self) -> ExplainRequest:
        if (self.image is None) == (self.image_ref is None):
            raise ValueError(ONE_IMAGE)
        return self


BODY = UploadBody(
    ExplainFields,
    ExplainRequest,
    image_field="image",
    many=False,
    least=0,
    description="the image as a multipart file part 'image' (the options as form fields, image_ref as "
    "JSON), or JSON with the image in base64; or no image and a probe-set image_ref",
)


ExplainDep = Annotated[ExplainService, Depends(from_state("explain"))]
router = feature_router("explanations")
_ERRORS = error_responses(
    "explanations",
    {
        **UPLOAD_ERRORS,
        404: "unknown model, probe set or probe image",
        422: "invalid field, caption words outside the vocabulary",
        501: "a gradient method without the 'explain' extra, or a repository without programs",
        503: "models not loaded yet, or the decoding queue is full",
    },
)


def _image(
    body: ExplainFields, blob: bytes | None, runtime: RuntimeDep
) -> tuple[Any, Mapping[str, Any] | None]:
    """uint8 [1, H, W, 3] and the scene graph (a probe-set image's, or the request's), its boxes in the
    served size's pixels."""
    image = runtime.manifest.image
    settings = runtime.settings
    if body.image_ref is not None:
        from service.probesets import ProbeSetError, repo_probe_sets

        try:
            sets = repo_probe_sets(settings.repo, runtime.manifest)
        except ProbeSetError as exc:
            raise ApiError(404, "unknown_probe_set", str(exc), field="image_ref.probe_set") from None
        ref = body.image_ref
        if ref.probe_set not in sets:
            raise ApiError(
                404,
                "unknown_probe_set",
                f"no probe set {ref.probe_set!r}{did_you_mean(ref.probe_set, sets)}",
                field="image_ref.probe_set",
            )
        probe = sets[ref.probe_set]
        if ref.image_id not in probe.file_names:
            raise ApiError(
                404,
                "unknown_image",
                f"{ref.probe_set} has no image {ref.image_id}",
                field="image_ref.image_id",
            )
        scene = (probe.scenes or {}).get(ref.image_id)
        scaled = None if scene is None else scaled_scene(scene, image.height, image.width)
        return probe.images([ref.image_id], image.height, image.width), scaled
    array = decode_image(
        blob or b"",
        image.height,
        image.width,
        max_bytes=settings.max_upload_bytes,
        max_pixels=settings.max_image_pixels,
        label="image",
    )
    if body.scene_graph is None:
        return array[None], None
    graph = body.scene_graph.model_dump()
    graph["size"] = list(body.scene_graph.size or upright_size(blob or b""))
    return array[None], scaled_scene(graph, image.height, image.width)


@router.post("/v1/explain", responses=_ERRORS, response_model=ExplainResponse, openapi_extra=BODY.operation())
async def explain(
    request: Request, runtime: RuntimeDep, engine: EngineDep, explainer: ExplainDep
) -> dict[str, Any]:
    """One map per caption word over the image regions (``method``), the region each word looked at
    most, what lies there, the pointing game and GroundingScore(δ) for δ ∈ {0, 1, 3, 5, ∞} when the
    image has a scene graph (``image_ref``, or ``scene_graph`` with an upload). The image comes as a
    multipart file part ``image`` (the options as form fields) or as base64 in JSON. See README,
    Explanations."""
    body, blobs = await BODY.read(request, runtime.settings, most=1)
    if bool(blobs) == (body.image_ref is not None):
        raise ApiError(422, "validation_error", ONE_IMAGE, field="request")
    if body.image_ref is not None and body.scene_graph is not None:
        raise ApiError(
            422,
            "validation_error",
            "give scene_graph with an uploaded image only: a probe-set image_ref brings its own",
            field="scene_graph",
        )
    if body.caption is not None and body.tokens is not None:
        raise ApiError(422, "validation_error", "give at most one of caption and tokens", field="tokens")
    params = engine.resolve(**body.model_dump(include=set(CaptionOptions.model_fields)))
    annotate(model=params.model, method=body.method)
    image, scene = await asyncio.to_thread(_image, body, blobs[0] if blobs else None, runtime)
    spec = ExplainInput(
        image=image,
        params=params,
        method=body.method,
        caption=body.caption,
        tokens=body.tokens,
        n_steps=body.n_steps,
        attribute_to=body.attribute_to,
        scene=scene,
        overlays=body.overlays,
        overlay_scale=body.overlay_scale,
    )
    return await explainer.explain(engine, spec)


__all__ = ["METHODS", "ExplainFields", "ExplainRequest", "SceneGraph", "router"]
