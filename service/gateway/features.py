"""The feature packages the gateway can serve, by their ``COMPCAP_FEATURES`` name, in the order they
are installed (their routes and tags appear in the OpenAPI document in this order): the one list of
features, ``service.settings.FEATURES`` (read off the features' settings sections). Feature ``X`` is
the package ``service.X``, whose ``feature`` module holds its ``install``; each is imported when it is
installed: a feature left out is not loaded."""

from __future__ import annotations

import importlib

from service.api.feature import Install
from service.settings import FEATURES as NAMES
from service.settings import Settings

FEATURES: dict[str, str] = {name: f"service.{name}.feature" for name in NAMES}  # name -> its install's module


def installs(settings: Settings) -> list[Install]:
    """The installs of the features ``settings`` serves, in ``FEATURES`` order."""
    served = set(settings.feature_names())
    return [importlib.import_module(module).install for name, module in FEATURES.items() if name in served]
