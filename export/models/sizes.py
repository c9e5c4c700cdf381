"""The one check every model's constructor makes of its sizes."""

from __future__ import annotations


def require_positive(**sizes: int) -> None:
    """``ValueError`` naming the first of ``sizes`` (keyword = the argument's name) that is not positive."""
    for name, value in sizes.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


__all__ = ["require_positive"]
