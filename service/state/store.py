"""``StateStore``: one SQLAlchemy engine over the shared state, migrated at open, with the replica's
name (the one it writes as holder of leases and runner of jobs).

URLs (``COMPCAP_STATE_URL``):

- ``sqlite:///compcap_state.db`` (the default; a path relative to the working directory, or
  ``sqlite:////abs/path.db``): one file shared by the processes of one host. WAL journal, a 10 s busy
  timeout, and ``BEGIN IMMEDIATE`` transactions, so two processes never deadlock on a lock upgrade;
- ``''`` (empty): an in-memory SQLite database, this process only (tests, throw-away runs);
- ``postgresql+psycopg://user:password@host:5432/db``: PostgreSQL, for replicas on several hosts.

Calls are blocking and short; async code runs them through ``StateStore.call`` (a worker thread), so
the event loop never waits on the database."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import StaticPool

from service.state.migrations import migrate
from service.state.url import DEFAULT_STATE_URL, check_state_url

R = TypeVar("R")


def replica_name() -> str:
    """This process's name in the store: ``COMPCAP_REPLICA`` if set, else ``<host>:<pid>`` (the pod's
    name on Kubernetes, where the host name is the pod's)."""
    return os.environ.get("COMPCAP_REPLICA") or f"{socket.gethostname()}:{os.getpid()}"


def _engine(url: str) -> sa.Engine:
    if not url:
        return sa.create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":  # a bare postgresql:// URL: psycopg 3
            parsed = parsed.set(drivername="postgresql+psycopg")
        return sa.create_engine(parsed, pool_pre_ping=True, pool_size=4, max_overflow=4)
    if parsed.database and parsed.database != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
    engine = sa.create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 10.0})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _: Any) -> None:
        dbapi_conn.isolation_level = None  # transactions are begun below, not by the driver
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class StateStore:
    """The shared state of this process: ``begin()`` a transaction, ``call`` a blocking function off
    the event loop. Construct with ``open_store``."""

    def __init__(self, url: str, replica: str | None = None) -> None:
        self.url = check_state_url(url)
        self.replica = replica or replica_name()
        self.engine = _engine(self.url)
        self.dialect = self.engine.dialect.name
        # an in-memory SQLite store is one connection: its transactions take turns
        self._lock = threading.Lock() if not self.url else None
        self._migrate_lock = threading.Lock()
        self.migrated: list[int] | None = None  # the versions applied at open; None until then

    def open(self) -> list[int]:
        """Connect and migrate (once; again after a failure): the versions applied now."""
        with self._migrate_lock:
            if self.migrated is None:
                self.migrated = migrate(self.engine)
            return self.migrated

    @property
    def shown_url(self) -> str:
        """The URL with its password hidden (logs, /v1/health)."""
        if not self.url:
            return "sqlite:// (in memory)"
        return sa.make_url(self.url).render_as_string(hide_password=True)

    @property
    def shared(self) -> bool:
        """Whether other processes can see this store."""
        return bool(self.url)

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """A transaction (the store is opened first if it was not: a store that was away when the
        gateway started is migrated on its first use)."""
        if self.migrated is None:
            self.open()
        if self._lock is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._lock, self.engine.begin() as conn:
            yield conn

    async def call(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` in a worker thread."""
        return await asyncio.to_thread(fn, *args)

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str, replica: str | None = None) -> StateStore:
    """The store at ``url``, its schema migrated to this CompCap's."""
    store = StateStore(url, replica)
    store.open()
    return store


__all__ = ["DEFAULT_STATE_URL", "StateStore", "check_state_url", "open_store", "replica_name"]
