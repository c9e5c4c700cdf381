"""Bounds of one captioner's scheduler, and the error a full admission queue raises."""

from __future__ import annotations

from dataclasses import dataclass

from service.engine.cohorts import COHORT_BOUNDS
from service.engine.request import Priority


class QueueFullError(Exception):
    """The admission queue is full; the caller should retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"the decoding queue is full; retry after {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class SchedulerLimits:
    """Bounds of one captioner's scheduler (from ``Settings``)."""

    max_rows: int
    max_queue: int
    max_active: int
    max_beam_size: int
    max_length: int
    max_background_rows: int | None = None  # None: background requests may take every row
    background_share: float = 1.0  # share of the time background requests hold rows while users decode
    cohort_bounds: tuple[int, ...] = COHORT_BOUNDS  # beam-width classes with arrays of their own; (): one

    def __post_init__(self) -> None:
        if not 0.0 < self.background_share <= 1.0:
            raise ValueError(f"background_share must be in (0, 1], got {self.background_share}")
        for name in ("max_rows", "max_queue", "max_active", "max_beam_size", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_background_rows is not None and self.max_background_rows < 1:
            raise ValueError(f"max_background_rows must be >= 1, got {self.max_background_rows}")

    def rows_for(self, priority: Priority) -> int:
        """The most rows one request of ``priority`` can be given while users are decoding."""
        if priority is Priority.BACKGROUND and self.max_background_rows is not None:
            return min(self.max_rows, self.max_background_rows)
        return self.max_rows


__all__ = ["QueueFullError", "SchedulerLimits"]
