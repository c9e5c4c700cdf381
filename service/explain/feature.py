"""``install(app, runtime)``: the explanations as a feature of the gateway — the ``ExplainService``
built from the settings, ``POST /v1/explain``, ``GET /v1/explain/methods`` (what can run here) and its
tag. Torch is imported only when a gradient method is asked for."""

from __future__ import annotations

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.feature import add_tag
from service.explain import capabilities
from service.explain.router import router
from service.explain.service import ExplainService
from service.explain.settings import ExplainSettings

TAG = {
    "name": "explanations",
    "description": "Per-word attribution maps (attention, saliency, guided backprop, integrated "
    "gradients) with the object under each word's argmax and GroundingScore(δ); which methods can run "
    "here, per captioner.",
}


def install(app: FastAPI, runtime: Runtime) -> None:
    """Serve ``POST /v1/explain`` and ``GET /v1/explain/methods``."""
    settings = ExplainSettings.of(runtime.settings)  # its own section
    app.state.explain = ExplainService(
        runtime.settings.engine.repo,
        runtime.manifest,
        runtime.vocab,
        settings.max_explanations,
        settings.explain_max_ig_steps,
        settings.explain_torch_threads,
    )
    runtime.reloader.on_reload(app.state.explain.use)
    app.include_router(router)
    app.include_router(capabilities.router)
    add_tag(app, TAG)
