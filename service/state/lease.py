"""Leases: a named row that one replica holds until it expires. The holder renews it every third of
its time to live; a replica that dies stops renewing, and once the lease has expired the first other
replica to try takes it. Taking and renewing are one conditional ``UPDATE`` (held by me, or expired),
atomic in SQLite and PostgreSQL alike, so two replicas never hold it at once — as long as the
replicas' clocks agree to well within the time to live (NTP on every node)."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from service.checks import above
from service.state.schema import leases
from service.state.store import StateStore


class Lease:
    def __init__(self, store: StateStore, name: str, ttl_s: float) -> None:
        above(0, ttl_s=ttl_s)
        if not name:
            raise ValueError("name must not be empty")
        self.store, self.name, self.ttl_s = store, name, ttl_s

    def try_acquire(self) -> bool:
        """Take or renew the lease; True when this replica holds it for another ``ttl_s``."""
        now = time.time()
        me = self.store.replica
        insert = pg_insert if self.store.dialect == "postgresql" else sqlite_insert
        with self.store.begin() as conn:
            conn.execute(
                insert(leases)
                .values(name=self.name, holder=me, expires_at=now + self.ttl_s, data={})
                .on_conflict_do_nothing(index_elements=["name"])
            )
            taken = conn.execute(
                sa.update(leases)
                .where(leases.c.name == self.name)
                .where(sa.or_(leases.c.holder == me, leases.c.expires_at < now))
                .values(holder=me, expires_at=now + self.ttl_s)
            )
            return taken.rowcount == 1

    def release(self) -> None:
        """Give the lease up now (a clean shutdown), so another replica need not wait for it to expire."""
        with self.store.begin() as conn:
            conn.execute(
                sa.update(leases)
                .where(leases.c.name == self.name, leases.c.holder == self.store.replica)
                .values(expires_at=0.0)
            )

    def holder(self) -> tuple[str, float] | None:
        """(holder, expires_at) of the lease, expired or not; None if never taken."""
        with self.store.begin() as conn:
            row = conn.execute(
                sa.select(leases.c.holder, leases.c.expires_at).where(leases.c.name == self.name)
            ).first()
        return None if row is None else (str(row[0]), float(row[1]))

    def data(self) -> dict[str, Any]:
        """What the holders keep with the lease (e.g. when the schedule is next due)."""
        with self.store.begin() as conn:
            value = conn.scalar(sa.select(leases.c.data).where(leases.c.name == self.name))
        return dict(value or {})

    def set_data(self, data: dict[str, Any]) -> bool:
        """Replace the lease's data if this replica holds it; False when it does not (any more)."""
        with self.store.begin() as conn:
            done = conn.execute(
                sa.update(leases)
                .where(leases.c.name == self.name, leases.c.holder == self.store.replica)
                .where(leases.c.expires_at >= time.time())
                .values(data=data)
            )
            return done.rowcount == 1


__all__ = ["Lease"]
