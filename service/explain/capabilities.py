"""``GET /v1/explain/methods``: which explanation methods each served captioner can run here, and why
not where it cannot. The rules are ``ExplainService.check``'s own — a gradient method needs torch and
captum (the ``explain`` extra) and the repository's torch programs of the captioner's graphs; attention
needs a captioner whose memory has a place in the image — asked once per method as a request for it
would be, so the listing and a refusal never disagree. The web page greys out what cannot run and
shows the reason."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import Depends, Query
from pydantic import BaseModel, Field

from service.api.deps import RuntimeDep, from_state
from service.api.errors import ApiError
from service.api.feature import error_responses, feature_router
from service.api.gate import RequestError
from service.engine.params import SearchParams
from service.explain.service import METHODS, ExplainInput, ExplainService

_NO_IMAGE = np.zeros((1, 1, 1, 3), dtype=np.uint8)  # check() reads no pixels


class MethodCapability(BaseModel):
    name: str = Field(description="the method, as POST /v1/explain's 'method' names it")
    available: bool
    code: str | None = Field(
        default=None,
        description="why not: the error code a request for it gets (extra_not_installed, programs_missing, "
        "unsupported_model)",
    )
    reason: str | None = Field(default=None, description="why not, in words (the refusal's message)")


class CaptionerMethods(BaseModel):
    model: str
    methods: list[MethodCapability] = Field(description="every method, in POST /v1/explain's order")


class MethodsResponse(BaseModel):
    captioners: list[CaptionerMethods]


def method_capabilities(service: ExplainService, model: str) -> list[MethodCapability]:
    """Each method of ``METHODS`` for captioner ``model``: available, or the code and reason of the
    refusal ``service.check`` gives a request for it (default options, one integrated-gradients step)."""
    out = []
    for method in METHODS:
        spec = ExplainInput(image=_NO_IMAGE, params=SearchParams(model=model), method=method, n_steps=1)
        try:
            service.check(spec)
        except RequestError as exc:
            out.append(MethodCapability(name=method, available=False, code=exc.code, reason=exc.message))
        else:
            out.append(MethodCapability(name=method, available=True))
    return out


ExplainDep = Annotated[ExplainService, Depends(from_state("explain"))]
router = feature_router("explanations")
_ERRORS = error_responses("explanations", {404: "unknown model"})


@router.get("/v1/explain/methods", responses=_ERRORS, response_model=MethodsResponse)
async def methods(
    runtime: RuntimeDep,
    explainer: ExplainDep,
    model: Annotated[str | None, Query(max_length=128, description="one captioner (default: all)")] = None,
) -> dict[str, Any]:
    """Per captioner, which explanation methods can run on this deployment, and why not where one
    cannot (the refusal POST /v1/explain would give). Needs no loaded model."""
    names = [c.name for c in runtime.manifest.captioners]
    if model is not None:
        if model not in names:
            known = ", ".join(names)
            raise ApiError(
                404, "unknown_model", f"unknown model {model!r}; captioners: {known}", field="model"
            )
        names = [model]
    return {"captioners": [{"model": n, "methods": method_capabilities(explainer, n)} for n in names]}


__all__ = ["MethodsResponse", "method_capabilities", "router"]
