"""The constructors' one check of numeric arguments (``service.checks``), through constructors that use
it: the error names the argument, its rule and the value given; NaN is refused too."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from service.checks import above, at_least, at_most, integer_at_least, within
from service.compare.reservoir import DiscrepancyReservoir
from service.evaluation.cider import CiderD


def test_each_value_is_checked_and_named() -> None:
    at_least(1, a=1, b=5, low=2)  # the bound is positional only: an argument may be called low
    above(0, s=0.5)
    with pytest.raises(ValueError, match=r"^b must be >= 1, got 0$"):
        at_least(1, a=3, b=0)
    with pytest.raises(ValueError, match=r"^s must be > 0, got 0$"):
        above(0, s=0)
    with pytest.raises(ValueError, match=r"^s must be > 0, got nan$"):
        above(0, s=math.nan)


def test_at_most_refuses_above_the_bound_and_nan() -> None:
    at_most(50, pool=50, other=-3)
    with pytest.raises(ValueError, match=r"^pool must be <= 50, got 51$"):
        at_most(50, pool=51)
    with pytest.raises(ValueError, match=r"^pool must be <= 50, got nan$"):
        at_most(50, pool=math.nan)


def test_within_is_a_closed_range_and_refuses_nan() -> None:
    within(0, 1, low=0, high=1, middle=0.5)
    for bad in (-0.1, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError, match=rf"^rate must be in \[0, 1\], got {bad}$"):
            within(0, 1, lo=0.5, rate=bad)


def test_integer_at_least_takes_python_and_numpy_integers_only() -> None:
    integer_at_least(1, n=1, m=np.int64(4), k=np.uint8(200))
    for bad in (0, 2.0, "3", True, None, math.nan):
        with pytest.raises(ValueError, match=rf"^n must be an integer >= 1, got {bad!r}$"):
            integer_at_least(1, n=bad)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CiderD({}, ref_count=0), "ref_count must be >= 1, got 0"),
        (lambda: CiderD({}, ref_count=1, n=0), "n must be >= 1, got 0"),
        (lambda: CiderD({}, ref_count=1, sigma=-1.0), "sigma must be > 0, got -1.0"),
        (lambda: DiscrepancyReservoir(capacity=0, max_bytes=10), "capacity must be >= 1, got 0"),
    ],
)
def test_constructors_refuse_naming_the_argument(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()
