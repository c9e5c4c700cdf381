"""``CaptionEngine``: the engine's public API — resolve request options into ``SearchParams``, caption
images through the captioner's ``Scheduler``, order the finished beams into ``Caption`` lists
(``service.engine.rerank``).

Everything that captions goes through it: the gateway, the offline studies (``CaptionEngine.from_repo``)
and the benchmark, so every report measures the code users get. It takes only the engine's section
of the settings (``EngineSettings``). With ``cross_request_batching`` off each request decodes in a
scheduler of its own (the naive baseline): the same code path, with no other request merged into its
step calls.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from service.backends.base import Backend
from service.engine.client import CaptionOutput, Checked, EngineClient
from service.engine.domain import DomainModel
from service.engine.limits import QueueFullError
from service.engine.params import OverloadedError
from service.engine.rerank import Caption, order_captions
from service.engine.runner import ModelRunner
from service.engine.scheduler import Scheduler
from service.engine.settings import CoreSettings, EngineSettings
from service.engine.tokens import banned_ids, captioner_vocabularies, load_subword
from service.manifest import Manifest, load_manifest
from service.metrics import Metrics
from service.text.subword import TokenVocabulary
from service.text.vocabulary import Vocabulary


class CaptionEngine(EngineClient):
    """Captions images with a repository's models on ``backend`` (see module docstring)."""

    def __init__(
        self,
        backend: Backend,
        manifest: Manifest,
        vocab: Vocabulary,
        settings: EngineSettings,
        metrics: Metrics | None = None,
    ) -> None:
        if len(vocab) != manifest.vocabulary.size:
            raise ValueError(
                f"vocab has {len(vocab)} words but manifest.vocabulary.size is {manifest.vocabulary.size}"
            )
        self.backend, self.manifest, self.vocab = backend, manifest, vocab
        self.settings = EngineSettings.of(settings)  # the engine's section, even of a whole Settings
        self.metrics = metrics
        # each captioner's tokens: the repository's words, or its own subword tokenizer (contract v2)
        self.vocabs: dict[str, TokenVocabulary] = captioner_vocabularies(self.settings.repo, manifest, vocab)
        ranker_tokens = {
            r.name: load_subword(self.settings.repo, r.tokens) for r in manifest.rankers if r.tokens
        }
        self.runner = ModelRunner(backend, manifest, vocab, ranker_tokens)
        # each calibrated captioner's typicality test (compcap calibrate)
        self.domains = {
            c.name: DomainModel.load(self.settings.repo / c.domain.file)
            for c in manifest.captioners
            if c.domain
        }
        self._schedulers: dict[str, Scheduler] = {}
        self._owns_backend = False
        self.in_flight = 0  # ``caption`` calls not yet answered
        self._retired = False
        self._stopping: set[asyncio.Task[None]] = set()

    @classmethod
    async def from_repo(
        cls, repo: str | Path, metrics: Metrics | None = None, **overrides: Any
    ) -> CaptionEngine:
        """An engine on ``repo`` with its own backend (the engine's and the backends' ``COMPCAP_*``
        settings, then ``overrides``, e.g. ``max_beam_size=100``); close it (or use ``async with``) to free
        the backend."""
        return await cls.from_settings(CoreSettings(repo=Path(repo), **overrides), metrics)

    @classmethod
    async def from_settings(cls, settings: CoreSettings, metrics: Metrics | None = None) -> CaptionEngine:
        """An engine with its own backend, as ``settings`` say (see ``from_repo``)."""
        from service.backends.registry import make_backend

        manifest = load_manifest(settings.repo)
        vocab = Vocabulary.load(settings.repo / manifest.vocabulary.file)
        backend = await make_backend(settings, manifest, metrics or Metrics())
        engine = cls(backend, manifest, vocab, settings, metrics)
        engine._owns_backend = True
        return engine

    async def __aenter__(self) -> CaptionEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for sched in self._schedulers.values():
            await sched.close()
        self._schedulers.clear()
        if self._owns_backend:
            await self.backend.close()

    def retire(self) -> None:
        """This engine's repository was reloaded and another engine serves new requests: what is in
        flight here finishes here (a probe job started on it goes on calling it), and its schedulers
        stop whenever nothing is (they start again if a call comes). The backend is freed with the
        engine, once nobody holds it."""
        self._retired = True
        self._stop_if_idle()

    def _stop_if_idle(self) -> None:
        if self._retired and self.in_flight == 0 and self._schedulers:
            schedulers, self._schedulers = list(self._schedulers.values()), {}
            for sched in schedulers:
                task = asyncio.get_running_loop().create_task(sched.close())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    def scheduler(self, captioner: str) -> Scheduler:
        """The cross-request scheduler of ``captioner`` (created on first use)."""
        if captioner not in self._schedulers:
            self._schedulers[captioner] = self._new_scheduler(captioner)
        return self._schedulers[captioner]

    def _new_scheduler(self, captioner: str) -> Scheduler:
        return Scheduler(
            self.runner,
            self.manifest.captioner(captioner),
            self.settings,
            banned_ids(self.manifest, captioner),
            self.metrics,
            users_anywhere=self.user_requests,
            decode=self.vocabs[captioner].decode,
            domain=self.domains.get(captioner),
        )

    def user_requests(self) -> int:
        """User requests in all the cross-request schedulers: background work of any captioner (probes,
        shadow, studies) yields to them, since every captioner shares the same cores."""
        return sum(s.user_requests for s in self._schedulers.values())

    async def _submit(self, request: Checked) -> CaptionOutput:
        """``caption`` (``EngineClient``) of a checked request: through the captioner's scheduler, or
        one of its own without cross-request batching."""
        images, params, timeout, priority, observer = request
        alone = not self.settings.cross_request_batching
        scheduler = self._new_scheduler(params.model) if alone else self.scheduler(params.model)
        self.in_flight += 1
        try:
            done = await scheduler.submit(images, params, timeout, priority, observer)
        except QueueFullError as exc:
            raise OverloadedError(exc.retry_after_s) from None
        finally:
            self.in_flight -= 1
            if alone:
                await scheduler.close()
            self._stop_if_idle()
        if self.metrics is not None:
            self.metrics.captions_served.labels(model=params.model).inc(len(images))
        results = [
            order_captions(
                per,
                None if done.ranker_scores is None else done.ranker_scores[i],
                params,
                self.vocabs[params.model].decode,
            )
            for i, per in enumerate(done.hypotheses)
        ]
        return CaptionOutput(params, results, done.timings_ms, done.iterations, done.domain)


__all__ = ["Caption", "CaptionEngine", "CaptionOutput"]
