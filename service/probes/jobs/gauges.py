"""Prometheus gauges of the last probe results, on the gateway's registry. Every succeeded probe job
(scheduled or asked for) sets them; every replica sets them again from the shared state
(``ProbeService.refresh``).

The common gauges (last success, duration) are here; each kind's own come from its record
(``ProbeKind.gauges``). ``ranker`` is ``none`` for a plain beam search. Recall and false-composition
rates are fractions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from service.probes.kinds import KINDS
from service.probes.kinds.bounds import latest_gauge
from service.probes.kinds.record import KindGauges


class ProbeGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.kinds: dict[str, KindGauges] = {
            name: kind.gauges(registry) for name, kind in KINDS.items() if kind.gauges is not None
        }
        model_kind = ["model", "kind"]
        self.last_success = latest_gauge(
            "compcap_probe_last_success_timestamp_seconds",
            "Unix time the last probe of this kind and model succeeded",
            model_kind,
            registry,
        )
        self.leader = latest_gauge(
            "compcap_probe_schedule_leader",
            "1 on the replica that holds the probe schedule's lease (runs the scheduled probes), else 0",
            [],
            registry,
        )
        self.duration = latest_gauge(
            "compcap_probe_duration_seconds",
            "Wall time of the last succeeded probe of this kind and model",
            model_kind,
            registry,
        )

    def record(
        self,
        kind: str,
        model: str,
        ranker: str | None,
        result: Mapping[str, Any],
        finished_at: float,
        seconds: float,
    ) -> None:
        own = self.kinds.get(kind)
        if own is not None:
            own.record(model, ranker or "none", result)
        self.last_success.labels(model, kind).set(finished_at)
        self.duration.labels(model, kind).set(seconds)

    def accept(self, kind: str, model: str, ranker: str | None, result: Mapping[str, Any]) -> None:
        """Make a result the baseline its later runs are compared with (the kinds that keep one)."""
        own = self.kinds.get(kind)
        if own is not None:
            own.accept(model, ranker or "none", result)


__all__ = ["ProbeGauges"]
