"""Typed responses of ``POST /v1/compare`` and ``GET /v1/compare/shadow`` (the OpenAPI contract)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ResolvedConfiguration(BaseModel):
    model: str
    beam_size: int
    ranker: str | None


class ComparedConfiguration(BaseModel):
    name: str
    options: dict[str, Any] = Field(description="the caption options as sent")
    resolved: ResolvedConfiguration


class PairSimilarity(BaseModel):
    a: str
    b: str
    ngsm: float = Field(
        description="NGSM (Wan et al., 2022, Eq. 4): geometric mean of NGSM_n, n = 1..4; 1 = same"
    )
    tie_break: float = Field(description="arithmetic mean of the defined NGSM_n (orders pairs at NGSM 0)")
    orders: list[float | None] = Field(
        description="NGSM_n for n = 1, 2, 3, 4 (Wan et al., 2022, Eq. 1, a multiset Jaccard: shared n-grams "
        "÷ (a's n-grams + b's − shared)), the per-order overlaps ngsm is the geometric mean of; null where "
        "neither caption has an n-gram of that order (left out of the mean). One 0 makes ngsm 0: two "
        "captions with no 4-gram in common have ngsm 0 however many words they share",
        min_length=4,
        max_length=4,
    )


class ComparedImage(BaseModel):
    index: int = Field(description="position of the image in the request")
    captions: dict[str, str] = Field(description="best caption per configuration name")
    pairs: list[PairSimilarity]
    min_ngsm: float
    min_tie_break: float
    most_discrepant_pair: list[str]


class CompareResponse(BaseModel):
    configurations: list[ComparedConfiguration]
    images: list[ComparedImage] = Field(description="most discrepant first (lowest min_ngsm)")
    timings_ms: dict[str, float]


class ShadowCaption(BaseModel):
    model: str | None = None
    configuration: str | None = None
    caption: str


class ShadowItem(BaseModel):
    similarity: float
    primary: ShadowCaption
    shadow: ShadowCaption
    image_png: str = Field(description="base64 PNG: a 64 px thumbnail, or the model-size image when enabled")
    image_kind: str
    seen_at: float = Field(description="Unix time")


class ShadowResponse(BaseModel):
    shadow: dict[str, Any] = Field(description="the shadow configuration: name and options")
    rate: float
    capacity: int
    max_bytes: int
    bytes: int
    seen: int = Field(description="images compared since start")
    pending: int = Field(description="shadow decodes waiting or running")
    items: list[ShadowItem] = Field(description="most discrepant first")
