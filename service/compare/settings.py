"""The comparison's settings section (with the shadow comparison's), collected into
``service.settings.Settings``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from service.sections import FeatureSection, blank_is_none


class CompareSettings(FeatureSection):
    """The comparison's section. The shadow configuration is parsed by ``service.compare`` when it
    installs."""

    feature: ClassVar[str] = "compare"
    title: ClassVar[str] = "Comparison"
    needs_feature: ClassVar[tuple[str, ...]] = ("shadow_model",)

    max_comparisons: int = Field(
        default=2,
        ge=1,
        le=64,
        description="comparisons (POST /v1/compare) at once; more get 429 (Retry-After)",
    )
    max_compare_configurations: int = Field(
        default=8, ge=2, le=64, description="most configurations one POST /v1/compare may name"
    )
    shadow_model: str | None = Field(
        default=None,
        description="shadow configuration decoded after sampled caption responses (a captioner name, "
        "NAME=MODEL?options or NAME={JSON}); unset: no shadow comparison",
    )
    shadow_rate: float = Field(
        default=0.1, ge=0.0, le=1.0, description="share of caption requests also decoded by the shadow"
    )
    shadow_reservoir_size: int = Field(
        default=20, ge=1, le=10_000, description="most discrepant live images GET /v1/compare/shadow keeps"
    )
    shadow_reservoir_bytes: int = Field(
        default=1 << 20, ge=1024, description="byte bound of the shadow reservoir (images and captions)"
    )
    shadow_keep_images: bool = Field(
        default=False,
        description="keep the decoded model-size image in the reservoir instead of a 64 px thumbnail",
    )
    shadow_max_pending: int = Field(
        default=4, ge=1, le=1024, description="shadow decodes waiting or running at once; beyond: skipped"
    )

    _shadow_blank = field_validator("shadow_model")(blank_is_none)
