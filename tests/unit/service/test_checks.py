"""The constructors' one check of numeric arguments (``service.checks``), through constructors that use
it: the error names the argument, its rule and the value given; NaN is refused too."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from service.checks import above, at_least
from service.compare.reservoir import DiscrepancyReservoir
from service.evaluation.cider import CiderD


def test_each_value_is_checked_and_named() -> None:
    at_least(1, a=1, b=5)
    above(0, s=0.5)
    with pytest.raises(ValueError, match=r"^b must be >= 1, got 0$"):
        at_least(1, a=3, b=0)
    with pytest.raises(ValueError, match=r"^s must be > 0, got 0$"):
        above(0, s=0)
    with pytest.raises(ValueError, match=r"^s must be > 0, got nan$"):
        above(0, s=math.nan)


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
