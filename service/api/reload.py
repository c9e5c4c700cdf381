"""Serving what changed on disk without a restart: models imported or quantized, probe sets built.

The repository's version (``service.manifest.repo_version``: its manifest.json and probe index) is
looked at every ``COMPCAP_REPO_WATCH_S`` seconds, and at once on ``POST /v1/admin/reload``. When it
changed, the ``Reloader`` loads the new manifest and — only if its models changed, or the reload was
forced — a new backend and engine (in an API process of ``--api-processes``, the engine core loads
them, asked with ``wire.Reload``). The switch is one step of the event loop: new requests go to the new
engine, those in flight (and probe jobs) finish on the one they started with, which is freed once idle
(``CaptionEngine.retire``). A repository that cannot be loaded leaves the old one serving and says
why (``ReloadError``; the watch logs it once per version).

Replicas: an admin reload also records a generation in the shared state store (``repo_reloads``);
every replica's watch sees it and does the same reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import sqlalchemy as sa

from service.api.settings import ServiceSettings
from service.backends.base import Backend
from service.backends.registry import make_backend
from service.engine.client import EngineClient
from service.engine.core_client import RemoteEngine
from service.engine.engine import CaptionEngine
from service.manifest import Manifest, load_manifest, repo_probe_set_entries, repo_version, same_models
from service.metrics import Metrics
from service.state import schema
from service.state.store import StateStore
from service.text.vocabulary import Vocabulary


class Served(Protocol):
    """What the reloader changes: the gateway's ``Runtime`` (``service.api.deps``)."""

    settings: ServiceSettings
    manifest: Manifest
    vocab: Vocabulary
    metrics: Metrics
    state: StateStore
    backend: Backend | None
    engine: EngineClient | None
    remote: RemoteEngine | None

    def export_deadlines(self) -> None:
        """Export each captioner's request deadline (after a new manifest)."""
        ...


log = logging.getLogger(__name__)

RELOADS = "repository"  # the one row of ``repo_reloads``


class ReloadError(RuntimeError):
    """The repository on disk cannot be served (the message says why); the old one goes on serving."""


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload did."""

    version: str  # the repository version served now
    previous: str
    models: bool  # the models were loaded again (a new engine)
    probe_sets: list[str]  # the probe sets served now
    seconds: float
    generation: int | None = None  # the reload asked of every replica, if one was recorded

    @property
    def changed(self) -> bool:
        return self.models or self.version != self.previous

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "previous_version": self.previous,
            "changed": self.changed,
            "models_reloaded": self.models,
            "probe_sets": self.probe_sets,
            "seconds": round(self.seconds, 3),
            "generation": self.generation,
        }


# -- the shared generation ------------------------------------------------------------------------


def read_generation(store: StateStore) -> tuple[int, bool]:
    """The last reload asked of every replica: (generation, force); (0, False) when none was."""
    with store.begin() as conn:
        row = conn.execute(
            sa.select(schema.repo_reloads.c.generation, schema.repo_reloads.c.force).where(
                schema.repo_reloads.c.name == RELOADS
            )
        ).first()
    return (int(row[0]), bool(row[1])) if row is not None else (0, False)


def next_generation(store: StateStore, force: bool) -> int:
    """Record a reload asked of every replica; its generation."""
    table = schema.repo_reloads
    with store.begin() as conn:
        current = conn.scalar(sa.select(table.c.generation).where(table.c.name == RELOADS))
        values = {"force": force, "requested_at": time.time(), "replica": store.replica}
        if current is None:
            conn.execute(sa.insert(table).values(name=RELOADS, generation=1, **values))
            return 1
        conn.execute(sa.update(table).where(table.c.name == RELOADS).values(generation=current + 1, **values))
        return int(current) + 1


# -- the reloader ---------------------------------------------------------------------------------


@dataclass
class Reloader:
    """Reloads ``runtime``'s repository (see module docstring). ``version`` is the one it serves."""

    runtime: Served
    version: str
    generation: int = 0  # the last reload asked of every replica that this process acted on
    listeners: list[Callable[[Manifest, Vocabulary], object]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _failed: str | None = None  # the version the watch last failed to load (reported once)

    def on_reload(self, listener: Callable[[Manifest, Vocabulary], object]) -> None:
        """``listener(manifest, vocab)`` after each reload that changed anything (a feature's caches)."""
        self.listeners.append(listener)

    async def reload(self, force: bool = False, generation: int | None = None) -> ReloadOutcome:
        """Serve the repository as it is on disk now: nothing when its version is the one served (unless
        ``force``); its new manifest (probe sets); new models when they changed or ``force``.
        ``ReloadError`` when it cannot be loaded."""
        async with self._lock:
            start = time.perf_counter()
            runtime = self.runtime
            repo = runtime.settings.repo
            if generation is not None:
                self.generation = max(self.generation, generation)
            try:
                version = await asyncio.to_thread(repo_version, repo)
                if version == self.version and not force:
                    return self._outcome(version, False, start, generation)
                manifest = await asyncio.to_thread(load_manifest, repo)
                vocab = await asyncio.to_thread(Vocabulary.load, repo / manifest.vocabulary.file)
                manifest.served_models(runtime.settings.precision)  # the precision it serves exists
                await asyncio.to_thread(repo_probe_set_entries, repo, manifest)  # its index reads
            except Exception as exc:
                raise ReloadError(
                    f"the repository {repo} cannot be loaded: {type(exc).__name__}: {exc}"
                ) from exc
            models = force or not same_models(manifest, runtime.manifest)
            if models:
                await self._new_models(manifest, vocab, force)
            runtime.manifest, runtime.vocab = manifest, vocab
            runtime.metrics.set_build_info(repo)
            runtime.export_deadlines()
            for listener in self.listeners:
                listener(manifest, vocab)
            outcome = self._outcome(version, models, start, generation)
            self.version = version
            runtime.metrics.repo_reloads.labels(outcome="models" if models else "manifest").inc()
            log.info(
                "repository %s reloaded: version %s -> %s%s (%.2f s)",
                repo,
                outcome.previous,
                version,
                ", new models" if models else "",
                outcome.seconds,
            )
            return outcome

    def _outcome(self, version: str, models: bool, start: float, generation: int | None) -> ReloadOutcome:
        sets = [e.name for e in repo_probe_set_entries(self.runtime.settings.repo, self.runtime.manifest)]
        return ReloadOutcome(version, self.version, models, sets, time.perf_counter() - start, generation)

    async def _new_models(self, manifest: Manifest, vocab: Vocabulary, force: bool) -> None:
        """Load the new models and switch to them (in one step of the event loop)."""
        runtime = self.runtime
        if runtime.remote is not None:  # the engine core holds the models: it loads them
            try:
                await runtime.remote.reload(force, self.generation)
            except Exception as exc:
                raise ReloadError(f"the engine core could not load the repository: {exc}") from exc
            runtime.remote.use(manifest, vocab)
            return
        if runtime.engine is None:
            return  # still loading: ``Runtime.load`` reads the new manifest's models
        try:
            backend = await make_backend(runtime.settings, manifest, runtime.metrics)
        except Exception as exc:
            raise ReloadError(f"loading the models failed: {type(exc).__name__}: {exc}") from exc
        old = runtime.engine
        runtime.backend = backend
        runtime.engine = CaptionEngine(backend, manifest, vocab, runtime.settings, runtime.metrics)
        if isinstance(old, CaptionEngine):
            old.retire()

    async def watch(self, every_s: float) -> None:
        """Every ``every_s`` seconds: reload when the repository's version changed, or another replica
        asked every replica to (a newer generation in the state store). A version that failed to load is
        reported once and not tried again; the next change is."""
        store = self.runtime.state
        if store.shared:
            try:
                self.generation = (await store.call(read_generation, store))[0]
            except Exception:
                log.warning("state store %s unreadable: reloads asked of every replica wait", store.shown_url)
        while True:
            await asyncio.sleep(every_s)
            try:
                await self._look()
            except Exception:
                log.exception("looking for a changed repository failed")

    async def _look(self) -> None:
        store = self.runtime.state
        generation, force = 0, False
        if store.shared:
            with contextlib.suppress(Exception):  # the store is away: the files are still watched
                generation, force = await store.call(read_generation, store)
        version = await asyncio.to_thread(repo_version, self.runtime.settings.repo)
        asked = generation > self.generation
        if not asked and version in (self.version, self._failed):
            return
        try:
            await self.reload(force and asked, generation if asked else None)
        except ReloadError as exc:
            self._failed = version
            log.error("%s; the repository loaded before goes on serving", exc)
            self.runtime.metrics.repo_reloads.labels(outcome="failed").inc()
