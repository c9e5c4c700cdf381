"""``DiscrepancyReservoir``: the k most discrepant items seen (lowest NGSM first), within a byte budget.

An item's size is its stored bytes (thumbnail PNG plus captions). Adding an item evicts the most
similar kept items until both bounds hold; an item more similar than everything kept while the
reservoir is full is refused. Order: ascending NGSM, then ascending mean NGSM_n (``ngsm_profile``'s
tie-break), then arrival (older first)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from service.checks import at_least


@dataclass(frozen=True)
class ReservoirItem:
    similarity: float  # NGSM, Eq. 4
    tie_break: float  # mean of the defined NGSM_n
    payload: dict[str, Any] = field(compare=False)
    size_bytes: int = field(default=0, compare=False)


class DiscrepancyReservoir:
    def __init__(self, capacity: int, max_bytes: int) -> None:
        at_least(1, capacity=capacity, max_bytes=max_bytes)
        self.capacity, self.max_bytes = capacity, max_bytes
        # max-heap on similarity through negation: the root is the most similar (first evicted)
        self._heap: list[tuple[float, float, int, ReservoirItem]] = []
        self._order = itertools.count()
        self.bytes = 0
        self.seen = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, item: ReservoirItem) -> bool:
        """Keep ``item`` if it is among the most discrepant within the bounds; True when kept."""
        self.seen += 1
        if item.size_bytes > self.max_bytes:
            self.refused += 1
            return False
        seq = next(self._order)
        key = (-item.similarity, -item.tie_break, -seq, item)
        heapq.heappush(self._heap, key)
        self.bytes += item.size_bytes
        while len(self._heap) > self.capacity or self.bytes > self.max_bytes:
            evicted = heapq.heappop(self._heap)[3]
            self.bytes -= evicted.size_bytes
            if evicted is item:
                self.refused += 1
                return False
        return True

    def items(self) -> list[ReservoirItem]:
        """Kept items, most discrepant first."""
        return [k[3] for k in sorted(self._heap, key=lambda k: (-k[0], -k[1], -k[2]))]

    def would_refuse(self, similarity: float, tie_break: float) -> bool:
        """Whether an item of this similarity would be refused now (full, and no more discrepant than
        the most similar kept): the caller can skip building it, and ``note_refused`` instead."""
        if len(self._heap) < self.capacity:
            return False
        most_similar = self._heap[0][3]  # the root: the most similar kept
        return (similarity, tie_break) >= (most_similar.similarity, most_similar.tie_break)

    def note_refused(self) -> None:
        """Count an item seen and refused without being built (``would_refuse``)."""
        self.seen += 1
        self.refused += 1

    def snapshot(self) -> dict[str, Any]:
        """Bounds, counters and the kept payloads, most discrepant first."""
        return {
            "capacity": self.capacity,
            "max_bytes": self.max_bytes,
            "bytes": self.bytes,
            "seen": self.seen,
            "refused": self.refused,
            "items": [dict(i.payload) for i in self.items()],
        }


__all__ = ["DiscrepancyReservoir", "ReservoirItem"]
