"""Request and response schemas of the HTTP API."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.engine.rerank import MAX_RERANK_WEIGHT
from service.manifest import Training
from service.settings import MAX_BEAM_SIZE

_FALSE = {"false", "0", "no", "off", "none", "null"}
_TRUE = {"true", "1", "yes", "on"}


class HookSpec(BaseModel):
    """One decoding hook: ``{"name": ..., "params": {...}}`` (see ``GET /v1/hooks``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    params: dict[str, Any] = Field(default_factory=dict)


class CaptionOptions(BaseModel):
    """Decoding options: query parameters (multipart requests) or JSON body fields.

    Defaults: ``model`` = the manifest's default captioner; ``beam_size`` = 5 (settings);
    ``max_length`` = the captioner's trained maximum (capped by settings); ``n_best`` = ``beam_size``
    (every finished beam is returned, so the ranker re-orders all of them); ``rerank`` = the
    captioner's jointly trained ranker if it has one, else none (``false`` turns it off, a ranker
    name picks one); ``length_penalty`` = 1.0 (score = logprob / words ** length_penalty). A re-ranked
    request re-ranks all ``beam_size`` finished beams and returns the best ``n_best`` (seed 000's
    BUTR+RR: ``beam_size=100, n_best=5``); ``rerank_weight`` = 0.0 (the ranker's order alone).
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = Field(default=None, description="captioner name")
    beam_size: int | None = Field(default=None, ge=1, le=MAX_BEAM_SIZE)
    max_length: int | None = Field(default=None, ge=1, description="most words in a caption")
    n_best: int | None = Field(
        default=None, ge=1, le=MAX_BEAM_SIZE, description="captions returned per image"
    )
    rerank: bool | str | None = Field(default=None, description="ranker name, or false for no re-ranking")
    length_penalty: float = Field(default=1.0, ge=0.0, le=2.0)
    rerank_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=MAX_RERANK_WEIGHT,
        description="re-ranked order = ranker cosine + rerank_weight × normalized_logprob (0: the ranker "
        "alone, as seed 000)",
    )
    hooks: list[HookSpec] | None = Field(
        default=None,
        description="decoding hooks applied in order; in a multipart request, a JSON array in the "
        "query string or a form field",
    )

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
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
    images: list[str] = Field(description="base64-encoded image files (data: URLs accepted)")


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


class ModelsResponse(BaseModel):
    preset: str
    default_captioner: str
    image: dict[str, int]
    captioners: list[CaptionerInfo]
    rankers: list[RankerInfo]


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
