"""``ceiling_of_limit``: how much of the step-only limit a gateway without any overhead could reach."""

import pytest

from loadtests.bench.ceiling import ceiling_of_limit, step_ms_alone, step_rows_per_s
from loadtests.load.http_load import step_call_seconds, step_rows
from service.metrics import BEAM_ROWS, MODEL_CALL

CURVE = [
    {"rows": 10, "ms_per_call": 1.0, "rows_per_s": 10_000.0},
    {"rows": 100, "ms_per_call": 4.0, "rows_per_s": 25_000.0},
    {"rows": 100, "ms_per_call": 5.0, "rows_per_s": 20_000.0},  # the slower spin mode is ignored
    {"rows": 200, "ms_per_call": 5.0, "rows_per_s": 40_000.0},
]


def test_step_rows_per_s_interpolates_time_per_call_and_clamps() -> None:
    assert step_rows_per_s(CURVE, 100) == pytest.approx(25_000.0)
    assert step_rows_per_s(CURVE, 150) == pytest.approx(150 / 4.5e-3)
    assert step_rows_per_s(CURVE, 1) == pytest.approx(10_000.0)  # below the range: the smallest size
    assert step_rows_per_s(CURVE, 999) == pytest.approx(40_000.0)
    with pytest.raises(ValueError, match="empty"):
        step_rows_per_s([], 10)


def test_ceiling_counts_the_other_models_and_the_batch_size() -> None:
    result = {
        "rows_per_caption": 40.0,
        "step_curve": CURVE,
        "limit": {"ideal_captions_per_s": 1000.0},  # 40 rows at 40 000 rows/s: 1 ms per caption
        "compute_limit": {
            "ms_per_caption": {"visual_encoder": 0.5, "cap_init": 0.1, "cap_step": 1.0, "r": 0.4}
        },
    }
    # at the best batch: 1 ms of step + 1 ms of the others -> 500 captions/s = 50% of the limit
    assert ceiling_of_limit(result, 200) == pytest.approx(0.5)
    # at 100 rows the step is slower (25 000 rows/s: 1.6 ms per caption) -> 1 / 2.6 ms
    assert ceiling_of_limit(result, 100) == pytest.approx((1e3 / 2.6) / 1000.0)


def test_step_ms_alone_is_the_curve_time_per_call_at_those_rows() -> None:
    assert step_ms_alone(CURVE, 100) == pytest.approx(4.0)
    assert step_ms_alone(CURVE, 150) == pytest.approx(4.5)


METRICS = f"""# HELP {MODEL_CALL} Backend model call time
{MODEL_CALL}_count{{model="cap_step"}} 40.0
{MODEL_CALL}_sum{{model="cap_step"}} 0.36
{MODEL_CALL}_count{{model="cap_step2"}} 7.0
{MODEL_CALL}_sum{{model="cap_step2"}} 9.0
{BEAM_ROWS}_count{{model="cap_step"}} 40.0
{BEAM_ROWS}_sum{{model="cap_step"}} 4000.0
"""


def test_the_step_histograms_are_read_for_that_model_only() -> None:
    assert step_call_seconds(METRICS, "cap_step") == (0.36, 40.0)
    assert step_rows(METRICS, "cap_step") == (4000.0, 40.0)
    assert step_call_seconds(METRICS, "cap_step2") == (9.0, 7.0)
    assert step_call_seconds(METRICS, "other") == (0.0, 0.0)
