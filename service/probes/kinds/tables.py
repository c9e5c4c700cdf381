"""Plain-text tables of probe results for the terminal (``compcap probe``): cells, lookups and column
padding that each probe kind's ``table`` renderer uses. Anything missing prints as ``-``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def cell(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    """``value`` as a table cell: ``-`` for None, yes/no, integers as they are, floats × ``scale``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value * scale:.{digits}f}"
    return str(value)


def get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or None where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def bounds(interval: Any, scale: float = 1.0, digits: int = 1) -> str:
    """An interval object's ``[low, high]`` × ``scale`` as a table cell, ``-`` without one."""
    low, high = get(interval, "low"), get(interval, "high")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return "-"
    return f"[{low * scale:.{digits}f}, {high * scale:.{digits}f}]"


def with_bounds(value: Any, interval: Any, scale: float = 1.0, digits: int = 1) -> str:
    """``value`` and its interval, ``0.267 [0.133, 0.400]``; the value alone without an interval."""
    shown = cell(value, scale, digits)
    around = bounds(interval, scale, digits)
    return shown if around == "-" or shown == "-" else f"{shown} {around}"


def fixed(value: Any, digits: int) -> str:
    """A number with ``digits`` decimals, or ``—`` (the web page's figures)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value:.{digits}f}"


__all__ = ["bounds", "cell", "fixed", "get", "table", "with_bounds"]
