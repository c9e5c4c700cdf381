"""The one check constructors make of their numeric arguments: ``ValueError`` naming the argument, its
rule and the value given (``max_jobs must be >= 1, got 0``). Each function takes its bound(s) first,
positional only, then the arguments as keywords (keyword = the argument's name, any name: ``low`` too),
checked in order; NaN passes none of them."""

from __future__ import annotations

from numbers import Integral


def at_least(low: float, /, **values: float) -> None:
    """Each of ``values`` (keyword = the argument's name) is ``>= low``."""
    for name, value in values.items():
        if not value >= low:
            raise ValueError(f"{name} must be >= {low}, got {value}")


def above(low: float, /, **values: float) -> None:
    """Each of ``values`` (keyword = the argument's name) is ``> low``."""
    for name, value in values.items():
        if not value > low:
            raise ValueError(f"{name} must be > {low}, got {value}")


def at_most(high: float, /, **values: float) -> None:
    """Each of ``values`` (keyword = the argument's name) is ``<= high``."""
    for name, value in values.items():
        if not value <= high:
            raise ValueError(f"{name} must be <= {high}, got {value}")


def within(low: float, high: float, /, **values: float) -> None:
    """Each of ``values`` (keyword = the argument's name) is in the closed range ``[low, high]``."""
    for name, value in values.items():
        if not low <= value <= high:
            raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def integer_at_least(low: int, /, **values: object) -> None:
    """Each of ``values`` (keyword = the argument's name) is an integer (Python's or numpy's, not a
    bool) ``>= low``: for arguments that arrive from JSON or a caller's own numbers unconverted."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


__all__ = ["above", "at_least", "at_most", "integer_at_least", "within"]
