"""Versioned migrations of the shared state. Each is a numbered step applied once, in order, and
recorded in ``compcap_schema_version``; every replica runs ``migrate`` at start-up and the steps it
finds missing are applied under a lock (PostgreSQL: a transaction-scoped advisory lock; SQLite: the
write lock its ``BEGIN IMMEDIATE`` takes), so replicas that start together apply each step once. A
store written by a newer CompCap (a version this one does not know) is refused, not downgraded."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from service.state import schema

_LOCK_KEY = 0x636F6D70  # 'comp': the advisory lock migrations take on PostgreSQL


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[sa.Connection], None]


def _initial(conn: sa.Connection) -> None:
    tables = [schema.probe_jobs, schema.probe_baselines, schema.leases]
    tables += [schema.shadow_items, schema.shadow_counters]
    schema.metadata.create_all(conn, tables=tables, checkfirst=True)


def _repo_reloads(conn: sa.Connection) -> None:
    schema.metadata.create_all(conn, tables=[schema.repo_reloads], checkfirst=True)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "probe jobs, baselines, leases, shadow reservoir", _initial),
    Migration(2, "repository reloads asked of every replica", _repo_reloads),
)


class SchemaTooNew(RuntimeError):
    pass


def applied_versions(conn: sa.Connection) -> set[int]:
    schema.metadata.create_all(conn, tables=[schema.schema_version], checkfirst=True)
    return set(conn.scalars(sa.select(schema.schema_version.c.version)))


def migrate(engine: sa.Engine) -> list[int]:
    """Apply the missing migrations; the versions applied now (empty when the store was current)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        done = applied_versions(conn)
        known = {m.version for m in MIGRATIONS}
        if done - known:
            raise SchemaTooNew(
                f"the state store is at schema version {max(done)}, newer than this CompCap's "
                f"{max(known)}: upgrade CompCap, or point COMPCAP_STATE_URL at another store"
            )
        applied = []
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            migration.apply(conn)
            conn.execute(
                sa.insert(schema.schema_version).values(
                    version=migration.version, description=migration.description, applied_at=time.time()
                )
            )
            applied.append(migration.version)
        return applied


__all__ = ["MIGRATIONS", "Migration", "SchemaTooNew", "applied_versions", "migrate"]
