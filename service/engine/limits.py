"""The row budget of one request by priority, and the error a full admission queue raises. The
scheduler's bounds are the engine's settings (``EngineSettings``), read under their own names."""

from __future__ import annotations

from service.engine.request import Priority
from service.engine.settings import EngineSettings


class QueueFullError(Exception):
    """The admission queue is full; the caller should retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"the decoding queue is full; retry after {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


def rows_for(settings: EngineSettings, priority: Priority) -> int:
    """The most rows one request of ``priority`` can be given while users are decoding."""
    if priority is Priority.BACKGROUND and settings.max_background_rows is not None:
        return min(settings.max_rows_per_step, settings.max_background_rows)
    return settings.max_rows_per_step


__all__ = ["QueueFullError", "rows_for"]
