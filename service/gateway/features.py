"""The feature packages the gateway can serve, by their ``COMPCAP_FEATURES`` name, in the order they
are installed (their routes and tags appear in the OpenAPI document in this order)."""

from __future__ import annotations

from service import compare, explain, probes
from service.api.feature import Install
from service.settings import Settings

FEATURES: dict[str, Install] = {
    "probes": probes.install,
    "explain": explain.install,
    "compare": compare.install,
}


def installs(settings: Settings) -> list[Install]:
    """The installs of the features ``settings`` serves, in ``FEATURES`` order."""
    served = set(settings.feature_names())
    return [install for name, install in FEATURES.items() if name in served]
