"""The contract between the gateway and a feature package (probes, explanations, comparison): each
exposes one ``install(app, runtime)`` that builds its service from the settings, includes its
router, adds its OpenAPI tag and hands its listeners and background work to the ``Runtime``
(``after_caption``, ``lifespans``). The gateway calls the installs of the features it serves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from service.api.deps import Runtime

Install = Callable[[FastAPI, Runtime], None]


def add_tag(app: FastAPI, tag: dict[str, Any]) -> None:
    """List ``tag`` (``name``, ``description``) after the app's tags in its OpenAPI document."""
    app.openapi_tags = [*(app.openapi_tags or []), tag]
