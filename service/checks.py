"""The one check constructors make of their numeric arguments: ``ValueError`` naming the argument, its
rule and the value given (``max_jobs must be >= 1, got 0``)."""

from __future__ import annotations


def at_least(low: float, **values: float) -> None:
    """Each of ``values`` (keyword = the argument's name) is ``>= low``."""
    for name, value in values.items():
        if not value >= low:
            raise ValueError(f"{name} must be >= {low}, got {value}")


def above(low: float, **values: float) -> None:
    """Each of ``values`` (keyword = the argument's name) is ``> low``."""
    for name, value in values.items():
        if not value > low:
            raise ValueError(f"{name} must be > {low}, got {value}")


__all__ = ["above", "at_least"]
