"""``StoredReservoir``: the shadow comparison's reservoir in the shared state (``service.state``), so
that every replica adds to one reservoir and ``GET /v1/compare/shadow`` shows the same items on any of
them. Same bounds, order and counters as the in-memory ``DiscrepancyReservoir``: ascending NGSM, then
ascending mean NGSM_n, then arrival; adding evicts the most similar items until both bounds hold.
Blocking calls (the shadow runs them in a worker thread). Concurrent adds of one shadow take turns on
its counters row (SQLite: the write lock; PostgreSQL: the row lock of the counters upsert)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from service.checks import at_least
from service.compare.reservoir import ReservoirItem
from service.state.schema import shadow_counters, shadow_items
from service.state.store import StateStore

_KEEP_ORDER = (shadow_items.c.similarity, shadow_items.c.tie_break, shadow_items.c.id)


class StoredReservoir:
    def __init__(self, store: StateStore, shadow: str, capacity: int, max_bytes: int) -> None:
        at_least(1, capacity=capacity, max_bytes=max_bytes)
        self.store, self.shadow, self.capacity, self.max_bytes = store, shadow, capacity, max_bytes

    def _count(self, conn: sa.Connection, seen: int, refused: int) -> None:
        insert = pg_insert if self.store.dialect == "postgresql" else sqlite_insert
        c = shadow_counters.c
        conn.execute(
            insert(shadow_counters)
            .values(shadow=self.shadow, seen=seen, refused=refused)
            .on_conflict_do_update(
                index_elements=["shadow"], set_={"seen": c.seen + seen, "refused": c.refused + refused}
            )
        )

    def add(self, item: ReservoirItem) -> bool:
        """Keep ``item`` if it is among the most discrepant within the bounds; True when kept."""
        with self.store.begin() as conn:
            if item.size_bytes > self.max_bytes:
                self._count(conn, 1, 1)
                return False
            self._count(conn, 1, 0)  # first: it locks this shadow's row until the commit
            new_id = conn.execute(
                sa.insert(shadow_items)
                .values(
                    shadow=self.shadow,
                    similarity=item.similarity,
                    tie_break=item.tie_break,
                    size_bytes=item.size_bytes,
                    payload=item.payload,
                )
                .returning(shadow_items.c.id)
            ).scalar_one()
            rows = conn.execute(
                sa.select(shadow_items.c.id, shadow_items.c.size_bytes)
                .where(shadow_items.c.shadow == self.shadow)
                .order_by(*_KEEP_ORDER)
            ).all()
            kept, total, evict = 0, 0, list[int]()
            for row_id, size in rows:  # the longest prefix within both bounds stays
                if not evict and kept < self.capacity and total + size <= self.max_bytes:
                    kept, total = kept + 1, total + size
                else:
                    evict.append(row_id)
            if evict:
                conn.execute(sa.delete(shadow_items).where(shadow_items.c.id.in_(evict)))
            if new_id in evict:
                self._count(conn, 0, 1)
                return False
            return True

    def would_refuse(self, similarity: float, tie_break: float) -> bool:
        """Whether an item of this similarity would be refused now (full, and no more discrepant than
        the most similar kept)."""
        with self.store.begin() as conn:
            mine = shadow_items.c.shadow == self.shadow
            count = conn.scalar(sa.select(sa.func.count()).select_from(shadow_items).where(mine)) or 0
            if count < self.capacity:
                return False
            top = conn.execute(
                sa.select(shadow_items.c.similarity, shadow_items.c.tie_break)
                .where(mine)
                .order_by(*(c.desc() for c in _KEEP_ORDER))
                .limit(1)
            ).first()
        return top is not None and (similarity, tie_break) >= (top[0], top[1])

    def note_refused(self) -> None:
        with self.store.begin() as conn:
            self._count(conn, 1, 1)

    def snapshot(self) -> dict[str, Any]:
        """Bounds, counters and the kept payloads, most discrepant first."""
        with self.store.begin() as conn:
            rows = conn.execute(
                sa.select(shadow_items.c.payload, shadow_items.c.size_bytes)
                .where(shadow_items.c.shadow == self.shadow)
                .order_by(*_KEEP_ORDER)
            ).all()
            counts = conn.execute(
                sa.select(shadow_counters.c.seen, shadow_counters.c.refused).where(
                    shadow_counters.c.shadow == self.shadow
                )
            ).first()
        seen, refused = (int(counts[0]), int(counts[1])) if counts is not None else (0, 0)
        return {
            "capacity": self.capacity,
            "max_bytes": self.max_bytes,
            "bytes": sum(int(r[1]) for r in rows),
            "seen": seen,
            "refused": refused,
            "items": [dict(r[0]) for r in rows],
        }


__all__ = ["StoredReservoir"]
