"""The load tests read the gateway's ``/metrics`` with prometheus_client's parser, by the names
``service/metrics.py`` (and the shadow comparer) register: fed a real registry's exposition, with
counters and histograms moved, they find the sums (counters' samples carry ``_total``, their families
do not; ``_created`` samples are not counted)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from prometheus_client import generate_latest

from compcap_lab.load.shadow_load import shadow_outcomes
from loadtests.bench.mix import abandoned_by_stage
from loadtests.load.http_load import histogram_totals, samples, step_call_seconds, step_rows
from service import metrics as metric_names
from service.compare.shadow import SHADOW_REQUESTS, ShadowComparer
from service.metrics import ABANDONED, BEAM_ROWS, PACED_ABANDONERS, Metrics


def exposition(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_every_gateway_metric_is_registered_under_a_constant_of_service_metrics() -> None:
    constants = {
        value for name, value in vars(metric_names).items() if name.isupper() and isinstance(value, str)
    }
    assert {family.name for family in Metrics().registry.collect()} == constants


def test_the_step_histograms_of_a_real_registry() -> None:
    metrics = Metrics()
    for rows in (10, 30, 60):
        metrics.beam_rows.labels(model="cap_step").observe(rows)
    metrics.beam_rows.labels(model="other_step").observe(500)
    metrics.model_call.labels(model="cap_step").observe(0.25)
    metrics.model_call.labels(model="cap_step").observe(0.5)
    text = exposition(metrics)
    assert step_rows(text, "cap_step") == (100.0, 3.0)
    assert step_rows(text, "other_step") == (500.0, 1.0)
    assert step_call_seconds(text, "cap_step") == pytest.approx((0.75, 2.0))
    assert step_rows(text, "absent") == (0.0, 0.0) == step_call_seconds(text, "other_step")
    assert histogram_totals("", BEAM_ROWS, "cap_step") == (0.0, 0.0)  # a server that keeps no metrics


def test_abandoned_requests_by_stage_and_paced_of_a_real_registry() -> None:
    metrics = Metrics()
    assert abandoned_by_stage(exposition(metrics)) == {"paced": 0.0}  # an unlabelled counter is always there
    metrics.abandoned.labels(model="butd", stage="waiting", reason="disconnect").inc(2)
    metrics.abandoned.labels(model="butr", stage="waiting", reason="deadline").inc()
    metrics.abandoned.labels(model="butd", stage="decoding", reason="disconnect").inc(4)
    metrics.paced_abandoners.inc(5)
    text = exposition(metrics)
    assert abandoned_by_stage(text) == {"waiting": 3.0, "decoding": 4.0, "paced": 5.0}
    # the family is named without _total, its samples with it, and the _created samples are apart
    assert [s.value for s in samples(text, ABANDONED)] == []
    assert [s.value for s in samples(text, f"{PACED_ABANDONERS}_total")] == [5.0]
    assert len(list(samples(text, f"{ABANDONED}_created"))) == 3


def test_shadow_outcomes_of_a_real_registry() -> None:
    metrics = Metrics()
    shadow = ShadowComparer(cast(Any, None), rate=1.0, registry=metrics.registry)
    shadow.requests.labels(primary="butd", shadow="WEAK", outcome="compared").inc(8)
    shadow.requests.labels(primary="butr", shadow="WEAK", outcome="compared").inc(2)
    shadow.requests.labels(primary="butd", shadow="WEAK", outcome="busy").inc()
    text = exposition(metrics)
    assert shadow_outcomes(text) == {"compared": 10.0, "busy": 1.0}
    assert f"{SHADOW_REQUESTS}_total{{" in text
    assert shadow_outcomes(exposition(Metrics())) == {}
