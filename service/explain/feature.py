"""``install(app, runtime)``: the explanations as a feature of the gateway — the ``ExplainService``
built from the settings, ``POST /v1/explain`` and its tag. Torch is imported only when a gradient
method is asked for."""

from __future__ import annotations

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.feature import add_tag
from service.explain.router import router
from service.explain.service import ExplainService

TAG = {
    "name": "explanations",
    "description": "Per-word attribution maps (attention, saliency, guided backprop, integrated "
    "gradients) with the object under each word's argmax and GroundingScore(δ).",
}


def install(app: FastAPI, runtime: Runtime) -> None:
    """Serve ``POST /v1/explain``."""
    settings = runtime.settings.explain  # its own section
    app.state.explain = ExplainService(
        runtime.settings.engine.repo,
        runtime.manifest,
        runtime.vocab,
        settings.max_explanations,
        settings.explain_max_ig_steps,
        settings.explain_torch_threads,
    )
    app.include_router(router)
    add_tag(app, TAG)
