"""A probe gauge with its interval: the figure under its own name (as the dashboards and alerts read it)
and the 95% interval's bounds as their own series, ``<name>_low`` and ``<name>_high``, with the same
labels. A result without an interval (one written before intervals, or a figure with none) leaves the
bounds as they were."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge


class BoundedGauge:
    def __init__(self, name: str, documentation: str, labels: Sequence[str], registry: CollectorRegistry):
        def gauge(suffix: str, doc: str) -> Gauge:
            return Gauge(name + suffix, doc, list(labels), multiprocess_mode="mostrecent", registry=registry)

        self.value = gauge("", documentation)
        self.low = gauge("_low", f"Lower bound of the 95% bootstrap interval of {name}")
        self.high = gauge("_high", f"Upper bound of the 95% bootstrap interval of {name}")

    def set(self, labels: Sequence[str], value: float, bounds: Mapping[str, Any] | None = None) -> None:
        """The figure, and its interval's ``low`` / ``high`` when ``bounds`` (an interval object) has them."""
        self.value.labels(*labels).set(value)
        if isinstance(bounds, Mapping) and bounds.get("low") is not None and bounds.get("high") is not None:
            self.low.labels(*labels).set(bounds["low"])
            self.high.labels(*labels).set(bounds["high"])


__all__ = ["BoundedGauge"]
