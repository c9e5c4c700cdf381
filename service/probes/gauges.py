"""Prometheus gauges of the last probe results, on the gateway's registry. Every succeeded probe job
(scheduled or asked for) sets them; a restarted gateway sets them again from its history file.

``ranker`` is ``none`` for a plain beam search. Recall and false-composition rates are fractions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Gauge


class ProbeGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.recall = Gauge(
            "compcap_probe_recall_at_k",
            "Live systematicity probe: Recall@K of a concept pair (seed 000 Eq. 1)",
            ["model", "ranker", "pair", "category", "k", "held_out"],
            registry=r,
        )
        self.recall_mean = Gauge(
            "compcap_probe_recall_at_k_mean",
            "Live systematicity probe: mean Recall@K over the held-out (held_out=true) or seen pairs",
            ["model", "ranker", "k", "held_out"],
            registry=r,
        )
        self.accepted_recall_mean = Gauge(
            "compcap_probe_accepted_recall_at_k_mean",
            "The accepted baseline of compcap_probe_recall_at_k_mean (POST /v1/probes/{id}/accept)",
            ["model", "ranker", "k", "held_out"],
            registry=r,
        )
        self.false_composition = Gauge(
            "compcap_probe_false_composition",
            "Share of Test-no-Comb images whose top-1 caption attaches the pair though the image does not",
            ["model", "ranker", "pair"],
            registry=r,
        )
        self.substitution_bleu4 = Gauge(
            "compcap_probe_substitution_bleu4",
            "Live substitutivity probe: BLEU-4 of S against O (seed 001 Table 6, O vs S)",
            ["model", "ranker"],
            registry=r,
        )
        self.productivity_cider = Gauge(
            "compcap_probe_productivity_cider_d",
            "Live productivity probe: CIDEr-D of the top-1 caption per density / length bucket",
            ["model", "ranker", "by", "bucket"],
            registry=r,
        )
        self.last_success = Gauge(
            "compcap_probe_last_success_timestamp_seconds",
            "Unix time the last probe of this kind and model succeeded",
            ["model", "kind"],
            registry=r,
        )
        self.duration = Gauge(
            "compcap_probe_duration_seconds",
            "Wall time of the last succeeded probe of this kind and model",
            ["model", "kind"],
            registry=r,
        )

    def record(
        self,
        kind: str,
        model: str,
        ranker: str | None,
        result: dict[str, Any],
        finished_at: float,
        seconds: float,
    ) -> None:
        rk = ranker or "none"
        if kind == "systematicity":
            for row in result.get("pairs", []):
                for k, value in row["recall"].items():
                    if value is not None:
                        self.recall.labels(
                            model, rk, row["pair"], row["category"] or "", k, str(row["held_out"]).lower()
                        ).set(value)
                rate = row["false_composition"].get("1")
                if rate is not None:
                    self.false_composition.labels(model, rk, row["pair"]).set(rate)
            for held, k, value in recall_means(result):
                self.recall_mean.labels(model, rk, k, held).set(value)
        elif kind == "substitutivity":
            bleu = result.get("rows", {}).get("O vs S", {}).get("bleu4")
            if bleu is not None:
                self.substitution_bleu4.labels(model, rk).set(bleu)
        elif kind == "productivity":
            for by, buckets in result.get("by", {}).items():
                for bucket, figures in buckets.items():
                    if figures.get("cider_d") is not None:
                        self.productivity_cider.labels(model, rk, by, bucket).set(figures["cider_d"])
        self.last_success.labels(model, kind).set(finished_at)
        self.duration.labels(model, kind).set(seconds)

    def accept(self, kind: str, model: str, ranker: str | None, result: dict[str, Any]) -> None:
        """Make a systematicity result the baseline its later runs are compared with (other kinds
        have no baseline gauge yet)."""
        if kind != "systematicity":
            return
        for held, k, value in recall_means(result):
            self.accepted_recall_mean.labels(model, ranker or "none", k, held).set(value)


def recall_means(result: dict[str, Any]) -> Iterator[tuple[str, str, float]]:
    """(held_out label "true"/"false", K, mean Recall@K) of a systematicity result, where defined."""
    for held, key in (("true", "held_out"), ("false", "seen")):
        for k, value in result.get(key, {}).get("recall", {}).items():
            if value is not None:
                yield held, k, value


__all__ = ["ProbeGauges"]
