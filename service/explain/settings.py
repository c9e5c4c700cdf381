"""The explanations' settings section, collected into ``service.settings.Settings``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from service.sections import FeatureSection


class ExplainSettings(FeatureSection):
    """The explanations' section."""

    feature: ClassVar[str] = "explain"
    title: ClassVar[str] = "Explanations"

    max_explanations: int = Field(
        default=2,
        ge=1,
        le=64,
        description="explanations (POST /v1/explain) at once; more get 429 with Retry-After",
    )
    explain_max_ig_steps: int = Field(
        default=200,
        ge=1,
        le=2000,
        description="largest n_steps an integrated-gradients explanation may ask for",
    )
    explain_torch_threads: int = Field(
        default=1, ge=1, le=64, description="torch intra-op threads of the gradient explanations"
    )
