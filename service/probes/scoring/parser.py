"""The attachment parser for live probes, in a process of its own.

spaCy's parser holds the GIL while it parses; inside the gateway's process it would stall the event
loop that serves caption users. So probes parse in one worker process (spawned, niced), which loads
``AttachmentChecker`` once and keeps every caption it parsed (reference captions repeat from job to
job). ``await parser.pairs(texts)`` returns each caption's attached pairs; ``lookup(parsed)`` turns
the answer into the synchronous ``PairsFn`` the scoring functions take."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from multiprocessing import get_context
from multiprocessing.pool import Pool
from typing import Any

from service.evaluation.recall import PairsFn
from service.text.concepts import ConceptPair

NICENESS = 10  # the worker yields the cores to the gateway's own threads

_checker: Any = None
_cache: dict[str, frozenset[ConceptPair]] = {}


def _init() -> None:
    global _checker
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    from service.text.attachment import AttachmentChecker

    _checker = AttachmentChecker()


def _parse(texts: list[str]) -> list[frozenset[ConceptPair]]:
    todo = [t for t in dict.fromkeys(texts) if t not in _cache]
    if todo:
        _cache.update(zip(todo, _checker.pairs_batch(todo), strict=True))
    return [_cache[t] for t in texts]


class PairParser:
    """One worker process parsing captions (started on first use; ``close`` terminates it; it also
    exits by itself when the gateway dies, as its pipe closes)."""

    def __init__(self) -> None:
        self._pool: Pool | None = None
        self._lock = asyncio.Lock()

    async def pairs(self, texts: Sequence[str]) -> dict[str, frozenset[ConceptPair]]:
        """Caption -> attached pairs for every distinct caption of ``texts``."""
        unique = list(dict.fromkeys(texts))
        if not unique:
            return {}
        async with self._lock:  # one batch at a time: the worker is single-threaded anyway
            if self._pool is None:
                self._pool = get_context("spawn").Pool(1, initializer=_init)
            loop = asyncio.get_running_loop()
            answer: asyncio.Future[list[frozenset[ConceptPair]]] = loop.create_future()

            def done(result: Any) -> None:
                if not answer.done():
                    answer.set_result(result)

            def failed(exc: BaseException) -> None:
                if not answer.done():
                    answer.set_exception(exc)

            self._pool.apply_async(
                _parse,
                (unique,),
                callback=lambda r: loop.call_soon_threadsafe(done, r),
                error_callback=lambda e: loop.call_soon_threadsafe(failed, e),
            )
            parsed = await answer
        return dict(zip(unique, parsed, strict=True))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def lookup(parsed: dict[str, frozenset[ConceptPair]]) -> PairsFn:
    """A ``PairsFn`` over captions already parsed (``KeyError`` for one that was not)."""

    def pairs_fn(captions: Sequence[str]) -> list[frozenset[ConceptPair]]:
        return [parsed[c] for c in captions]

    return pairs_fn


__all__ = ["PairParser", "lookup"]
