"""The response of ``POST /v1/explain`` (typed for the OpenAPI document and the clients)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class UnderArgmax(BaseModel):
    labels: list[str] = Field(
        description="classes there: an object's noun (and prop), the background or 'backdrop'"
    )
    object: dict[str, Any] | None = Field(
        description="the scene-graph object (id, noun, bbox), null: background"
    )


class ExplainedWord(BaseModel):
    index: int
    word: str
    noun: str | None = Field(description="the class the word names (concept inventory), null if none")
    logprob: float | None = Field(description="the model's log-prob of the word at its step")
    values: list[list[float]] | list[float] = Field(
        description="raw attribution per region, as the grid [g][g]"
    )
    argmax_region: int = Field(description="row-major region index of the highest value")
    argmax_box: list[float] | None = Field(default=None, description="its pixel box [x0, y0, x1, y1]")
    overlay_png: str | None = Field(default=None, description="base64 PNG: the map over the image")
    under_argmax: UnderArgmax | None = Field(default=None, description="scene-graph images only")
    pointing: bool | None = Field(default=None, description="argmax inside a box of the named object")
    pointing_chance: float | None = Field(
        default=None, description="share of cells whose centre is in such a box"
    )
    grounded: bool | None = Field(
        default=None, description="a noun whose class is under its own argmax (δ = 0)"
    )


class IntegratedGradientsInfo(BaseModel):
    n_steps: int
    baseline: str
    delta: list[float] = Field(description="per word: Σ attributions − (S_w(x) − S_w(baseline))")
    score_gap: list[float] = Field(description="per word: S_w(x) − S_w(baseline)")
    mean_abs_delta: float
    mean_relative_delta: float = Field(description="mean |delta| / |score_gap|")


class GuidedBackpropInfo(BaseModel):
    relu_modules: int = Field(description="ReLUs whose negative gradients are stopped (0: plain gradient)")
    note: str


class GroundingInterval(BaseModel):
    low: float = Field(description="lower bound of the 95% interval")
    high: float = Field(description="upper bound of the 95% interval")
    nouns: int = Field(description="the caption's nouns the score averages (the bootstrap's units)")


class ExplainResponse(BaseModel):
    model: str
    method: str
    attribute_to: str
    caption: str
    source: str = Field(description="'engine' (its best caption) or 'client' (teacher-forced)")
    logprob: float | None = None
    normalized_logprob: float | None = None
    ranker_score: float | None = None
    grid: list[int] | None
    grid_area: list[float] = Field(
        description="[x0, y0, x1, y1]: where the grid lies in the image (a centre-cropping encoder's crop; "
        "else the whole image)"
    )
    image_size: list[int]
    scene_graph: bool
    words: list[ExplainedWord]
    grounding_score: dict[str, float] | None = Field(
        description="GroundingScore by δ: '0', '1', '3', '5', 'inf'"
    )
    grounding_score_interval: dict[str, GroundingInterval] | None = Field(
        default=None,
        description="by δ: the 95% bootstrap interval of GroundingScore over the caption's nouns (the "
        "units it averages; seeded); null without a scene graph or a noun",
    )
    integrated_gradients: IntegratedGradientsInfo | None = None
    guided_backprop: GuidedBackpropInfo | None = None
    timings_ms: dict[str, float] = Field(description="caption, maps, render, per_word (maps ÷ words)")
