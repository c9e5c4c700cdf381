"""``POST /v1/admin/reload``: serve what changed in the repository now, on every replica
(``service.api.reload``), behind the API keys when ``COMPCAP_API_KEYS`` is set."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, Field

from service.api.auth import KEY_ERRORS, require_key
from service.api.deps import RuntimeDep
from service.api.errors import ApiError
from service.api.reload import ReloadError, next_generation

log = logging.getLogger(__name__)

router = APIRouter(tags=["admin"], dependencies=[Depends(require_key)])


class ReloadRequest(BaseModel):
    force: bool = Field(
        default=False,
        description="load the models again even if manifest.json is unchanged (ONNX files replaced in place)",
    )


class ReloadResponse(BaseModel):
    version: str = Field(
        description="the repository version served now (sha256 of its manifest and probe index)"
    )
    previous_version: str
    changed: bool = Field(description="whether anything new is served")
    models_reloaded: bool = Field(
        description="the models were loaded again (requests in flight finish on the old)"
    )
    probe_sets: list[str] = Field(description="the probe sets served now")
    seconds: float
    generation: int | None = Field(
        description="the reload recorded in the shared state store, which every other replica does within "
        "COMPCAP_REPO_WATCH_S; null: this replica only (no shared store, or it could not be written)"
    )


@router.post(
    "/v1/admin/reload",
    response_model=ReloadResponse,
    responses={
        **KEY_ERRORS,
        409: {
            "description": "the repository on disk cannot be loaded; the one loaded before goes on serving"
        },
    },
)
async def reload(runtime: RuntimeDep, body: Annotated[ReloadRequest | None, Body()] = None) -> dict[str, Any]:
    """Serve the repository as it is on disk now: new probe sets, imported or quantized models. Models
    are loaded again only when they changed (or ``force``); requests in flight finish on the models
    they started with. Every replica sharing the state store does the same."""
    force = body.force if body is not None else False
    generation: int | None = None
    if runtime.state.shared:
        try:
            generation = await runtime.state.call(next_generation, runtime.state, force)
        except Exception:
            log.exception("the reload could not be recorded in the state store: this replica only")
    try:
        outcome = await runtime.reloader.reload(force, generation)
    except ReloadError as exc:
        runtime.metrics.repo_reloads.labels(outcome="failed").inc()
        raise ApiError(409, "reload_failed", str(exc)) from None
    return outcome.as_dict()
