"""A probe gauge with its interval: the figure under its own name (as the dashboards and alerts read it)
and the 95% interval's bounds as their own series, ``<name>_low`` and ``<name>_high``, with the same
labels; ``latest_gauge`` is a probe gauge without them. A result without an interval (one written
before intervals, or a figure with none) leaves the bounds as they were."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge


def latest_gauge(name: str, documentation: str, labels: Sequence[str], registry: CollectorRegistry) -> Gauge:
    """A probe gauge: it keeps the most recent value of any process (``multiprocess_mode="mostrecent"``)."""
    return Gauge(name, documentation, list(labels), multiprocess_mode="mostrecent", registry=registry)


class BoundedGauge:
    def __init__(self, name: str, documentation: str, labels: Sequence[str], registry: CollectorRegistry):
        self.value = latest_gauge(name, documentation, labels, registry)
        self.low = latest_gauge(
            name + "_low", f"Lower bound of the 95% bootstrap interval of {name}", labels, registry
        )
        self.high = latest_gauge(
            name + "_high", f"Upper bound of the 95% bootstrap interval of {name}", labels, registry
        )

    def set(self, labels: Sequence[str], value: float, bounds: Mapping[str, Any] | None = None) -> None:
        """The figure, and its interval's ``low`` / ``high`` when ``bounds`` (an interval object) has them."""
        self.value.labels(*labels).set(value)
        if isinstance(bounds, Mapping) and bounds.get("low") is not None and bounds.get("high") is not None:
            self.low.labels(*labels).set(bounds["low"])
            self.high.labels(*labels).set(bounds["high"])


__all__ = ["BoundedGauge", "latest_gauge"]
