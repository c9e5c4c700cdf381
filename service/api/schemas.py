"""Request and response schemas of the HTTP API."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.api.limits import check_hook_params, check_json
from service.engine.hooks import MAX_HOOKS
from service.engine.params import MAX_RERANK_WEIGHT
from service.engine.settings import MAX_BEAM_SIZE
from service.manifest import Training

_FALSE = {"false", "0", "no", "off", "none", "null"}
_TRUE = {"true", "1", "yes", "on"}
MAX_NAME = 64  # characters in a model, ranker or hook name (names are echoed in errors)
MAX_IMAGE_CHARS = 16 * 1024 * 1024  # base64 characters of a JSON image (then COMPCAP_MAX_UPLOAD_BYTES)
# an 8x8 PNG: the request examples caption a real image
EXAMPLE_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAFUlEQVR42mM8UaHBgA0wMeAAg1MCAB4nAXgllso1AAAAAElFTkSuQmCC"
)
EXAMPLE_HOOKS = [{"name": "no_repeat_ngram", "params": {"n": 2}}]


class HookSpec(BaseModel):
    """One decoding hook: ``{"name": ..., "params": {...}}`` (see ``GET /v1/hooks``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME, examples=["no_repeat_ngram"])
    params: dict[str, Any] = Field(
        default_factory=dict, description="the hook's parameters (``GET /v1/hooks``)", examples=[{"n": 2}]
    )

    @field_validator("params")
    @classmethod
    def _bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_hook_params(value)
        return value


class CaptionOptions(BaseModel):
    """Decoding options: query parameters (multipart requests) or JSON body fields.

    Defaults: ``model`` = the manifest's default captioner; ``beam_size`` = 5 (settings);
    ``max_length`` = the captioner's trained maximum (capped by settings); ``n_best`` = ``beam_size``
    (every finished beam is returned, so the ranker re-orders all of them); ``rerank`` = the
    captioner's jointly trained ranker if it has one, else none (``false`` turns it off, a ranker
    name picks one); ``length_penalty`` = 1.0 (score = logprob / words ** length_penalty). A re-ranked
    request re-ranks all ``beam_size`` finished beams and returns the best ``n_best`` (BUTR+RR of
    Nikolaus et al., 2019: ``beam_size=100, n_best=5``); ``rerank_weight`` = 0.0 (the ranker's order alone).
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = Field(default=None, max_length=MAX_NAME, description="captioner name")
    beam_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BEAM_SIZE,
        description="beams kept per image (the operator may cap it lower)",
    )
    max_length: int | None = Field(default=None, ge=1, description="most words in a caption")
    n_best: int | None = Field(
        default=None, ge=1, le=MAX_BEAM_SIZE, description="captions returned per image"
    )
    rerank: bool | Annotated[str, Field(max_length=MAX_NAME)] | None = Field(
        default=None, description="ranker name, true (the captioner's own) or false for no re-ranking"
    )
    length_penalty: float = Field(
        default=1.0, ge=0.0, le=2.0, description="score = summed log-prob / words ** length_penalty"
    )
    rerank_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=MAX_RERANK_WEIGHT,
        description="re-ranked order = ranker cosine + rerank_weight × normalized_logprob (0: the ranker "
        "alone, as in Nikolaus et al., 2019)",
    )
    hooks: list[HookSpec] | None = Field(
        default=None,
        max_length=MAX_HOOKS,
        description="decoding hooks applied in order; in a multipart request, a JSON array in the "
        "query string or a form field",
        examples=[EXAMPLE_HOOKS],
    )

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            check_json(value, "the hooks JSON")  # a LimitError (400 json_too_deep) passes through pydantic
            try:
                return json.loads(value)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"hooks must be a JSON array: {exc}") from None
        return value

    @field_validator("rerank", mode="before")
    @classmethod
    def _rerank_words(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().lower() in _FALSE:
                return False
            if value.strip().lower() in _TRUE:
                return True
            if not value.strip():
                raise ValueError("rerank must be a ranker name, true or false")
        return value

    def engine_kwargs(self) -> dict[str, Any]:
        return self.model_dump()


class CaptionJSONRequest(CaptionOptions):
    """``POST /v1/captions`` as JSON: base64 images (or allowed image URLs) and the decoding options."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"images": [EXAMPLE_PNG], "beam_size": 5, "n_best": 3}]}
    )

    images: list[str] = Field(
        description="base64-encoded image files (data: URLs accepted), or http(s):// image URLs the "
        "gateway fetches from the hosts its operator allows (COMPCAP_IMAGE_URL_HOSTS; none by default)"
    )


class CaptionOut(BaseModel):
    text: str
    tokens: list[int] = Field(description="word ids, no BOS/EOS")
    logprob: float = Field(description="summed log-probability, EOS included")
    normalized_logprob: float = Field(description="logprob / words ** length_penalty")
    ranker_score: float | None = Field(description="cosine with the image, if re-ranked")
    beam_rank: int = Field(description="1 = best by normalized_logprob")


class ImageResult(BaseModel):
    index: int
    caption: str = Field(description="the best caption's text")
    captions: list[CaptionOut]
    original_caption: str | None = Field(
        default=None, description="synonym_substitution: the best caption without substitution (O)"
    )
    original_captions: list[CaptionOut] | None = Field(
        default=None, description="synonym_substitution: every caption of the search without it (O)"
    )
    in_domain: bool | None = Field(
        default=None,
        description="whether the image is like the captioner's validation images (null: not calibrated; "
        "README, Out-of-domain images)",
    )
    domain_score: float | None = Field(
        default=None, description="its typicality distance over the calibrated threshold (in domain: <= 1)"
    )


class Timings(BaseModel):
    decode_images: float
    encode: float
    decode: float
    rerank: float
    total: float


class CaptionResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    model: str
    ranker: str | None
    beam_size: int
    n_best: int
    max_length: int
    length_penalty: float
    rerank_weight: float
    hooks: list[str] = Field(default_factory=list, description="hooks applied, in order")
    results: list[ImageResult]
    timings_ms: Timings


class CaptionerInfo(BaseModel):
    name: str
    architecture: str
    reads: str
    max_length: int
    default_ranker: str | None = Field(description="jointly trained ranker used when rerank is not given")
    training: Training = Field(description="split and the held-out pairs the model never saw together")
    quality: dict[str, float]


class RankerInfo(BaseModel):
    name: str
    architecture: str
    embedding_dim: int
    joint_with: str | None
    training: Training


class ImageShape(BaseModel):
    height: int = Field(description="images are resized to height x width before encoding")
    width: int


class ModelsResponse(BaseModel):
    preset: str
    default_captioner: str
    image: ImageShape
    captioners: list[CaptionerInfo]
    rankers: list[RankerInfo]


class HookInfo(BaseModel):
    name: str
    description: str
    params: dict[str, str] = Field(description="parameter name -> what it takes")


class HooksResponse(BaseModel):
    hooks: list[HookInfo] = Field(description="the hooks a request may name in ``hooks``, in registry order")


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    device: str = Field(
        default="none",
        description="where the models run: cuda, cpu, mixed (GET /v1/models lists each model's), or "
        "none while they load",
    )


class ReadyResponse(BaseModel):
    status: Literal["ready", "loading", "failed"]
    backend: str | None = Field(default=None, description="the serving backend, once ready")
    error: str | None = Field(default=None, description="why loading failed")


class ErrorField(BaseModel):
    field: str = Field(
        description="the path to the value at fault, dotted with list indices as segments, e.g. "
        "``beam_size``, ``hooks.0.params.n``, ``configurations.1.model``; ``request`` for the whole request"
    )
    message: str


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable reason, e.g. ``not_an_image``, ``json_too_deep``")
    message: str = Field(
        description="what was wrong, naming the field or limit; an unknown field or choice close to a "
        "known one ends with ``(did you mean 'beam_size'?)``"
    )
    details: list[ErrorField] | None = None


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "validation_error",
                        "message": "beam_size: Input should be less than or equal to 100",
                        "details": [
                            {"field": "beam_size", "message": "Input should be less than or equal to 100"}
                        ],
                    }
                }
            ]
        }
    )

    error: ErrorDetail
