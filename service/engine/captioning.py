"""The captioning pipeline: encode → init → beam loop → optional re-rank.

``CaptionEngine.resolve`` turns request options into validated ``CaptionParams``;
``CaptionEngine.caption`` runs one request. With ``SchedulerLimits`` (the gateway's default) the
request joins the captioner's ``CaptionerScheduler``, whose loop makes one ``<cap>_step`` call per
iteration for every live row of every active request; without them (``scheduling=None``) each
request decodes alone — one ``<cap>_step`` call per iteration for its own rows only — which is the
"naive" baseline the benchmark compares against.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.backends.base import Backend
from service.engine.beam import AsyncStepFn, Hypothesis, beam_search_async, length_norm
from service.engine.hooks import HookError, HookPlan, build_hooks
from service.engine.rerank import MAX_RERANK_WEIGHT, fixed_dim, ranker_scores, rerank_order
from service.engine.scheduler import CaptionerScheduler, DecodeRequest, QueueFullError
from service.manifest import CaptionerEntry, Manifest
from service.metrics import Metrics
from service.text.vocabulary import Vocabulary


class EngineError(Exception):
    """A request the engine refuses. ``code`` is a stable reason; ``field`` the parameter at fault."""

    code = "invalid_parameter"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class InvalidParameterError(EngineError):
    code = "invalid_parameter"


class UnknownModelError(EngineError):
    code = "unknown_model"


class OverloadedError(EngineError):
    """The decoding queue is full: answer 503 with ``Retry-After``."""

    code = "overloaded"

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("request", f"the decoding queue is full; retry after {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class SchedulerLimits:
    """Bounds of each captioner's cross-request scheduler."""

    max_rows: int = 512
    max_queue: int = 256
    max_active: int = 128

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_queue", "max_active"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class EngineLimits:
    default_beam_size: int = 5
    max_beam_size: int = 10
    max_length_cap: int = 40

    def __post_init__(self) -> None:
        if not 1 <= self.default_beam_size <= self.max_beam_size:
            raise ValueError(f"default_beam_size must be in [1, max_beam_size], got {self.default_beam_size}")
        if self.max_length_cap < 1:
            raise ValueError(f"max_length_cap must be >= 1, got {self.max_length_cap}")


@dataclass(frozen=True)
class CaptionParams:
    captioner: str
    beam_size: int
    max_length: int
    n_best: int
    length_penalty: float
    ranker: str | None
    hooks: HookPlan | None = None  # this request's decoding hooks (None: plain beam search)
    rerank_weight: float = 0.0  # re-rank score = ranker cosine + rerank_weight · normalized_logprob

    @property
    def hook_names(self) -> list[str]:
        return [] if self.hooks is None else self.hooks.names

    @property
    def search_n_best(self) -> int:
        """Finished beams the search keeps: all of them when a ranker re-ranks (seed 000 §5.4: B
        candidates re-ranked, the best ``n_best`` returned), else the ``n_best`` most likely."""
        return self.beam_size if self.ranker is not None else self.n_best


@dataclass(frozen=True)
class Caption:
    text: str
    tokens: list[int]
    logprob: float
    normalized_logprob: float
    ranker_score: float | None
    beam_rank: int  # 1 = best by normalised log-prob


@dataclass
class CaptionOutput:
    params: CaptionParams
    results: list[list[Caption]]  # per image, final order (ranker score if re-ranked)
    timings_ms: dict[str, float] = field(default_factory=dict)
    # synonym_substitution with return_original: the captions of the same search without it (O)
    original: list[list[Caption]] | None = None


class CaptionEngine:
    def __init__(
        self,
        backend: Backend,
        manifest: Manifest,
        vocab: Vocabulary,
        metrics: Metrics | None = None,
        limits: EngineLimits | None = None,
        scheduling: SchedulerLimits | None = None,
    ) -> None:
        if len(vocab) != manifest.vocabulary.size:
            raise ValueError(
                f"vocab has {len(vocab)} words but manifest.vocabulary.size is {manifest.vocabulary.size}"
            )
        self.backend = backend
        self.manifest = manifest
        self.vocab = vocab
        self.metrics = metrics
        self.limits = limits or EngineLimits()
        spec = manifest.vocabulary
        self.banned = tuple(sorted({spec.pad_id, spec.bos_id, spec.unk_id} - {spec.eos_id}))
        self.scheduling = scheduling
        self._schedulers: dict[str, CaptionerScheduler] = {}

    def scheduler(self, captioner: str) -> CaptionerScheduler:
        """The cross-request scheduler of ``captioner`` (created on first use)."""
        if self.scheduling is None:
            raise RuntimeError("this engine decodes each request alone (scheduling=None)")
        if captioner not in self._schedulers:
            self._schedulers[captioner] = CaptionerScheduler(
                self.backend,
                self.manifest,
                self.manifest.captioner(captioner),
                self.banned,
                max_rows=self.scheduling.max_rows,
                max_queue=self.scheduling.max_queue,
                max_active=self.scheduling.max_active,
                metrics=self.metrics,
                beam_capacity=self.limits.max_beam_size,
            )
        return self._schedulers[captioner]

    async def close(self) -> None:
        for sched in self._schedulers.values():
            await sched.close()
        self._schedulers.clear()

    # -- parameters -------------------------------------------------------------------------------

    def max_length_for(self, captioner: CaptionerEntry) -> int:
        return min(self.limits.max_length_cap, captioner.max_length)

    def resolve(
        self,
        model: str | None = None,
        beam_size: int | None = None,
        max_length: int | None = None,
        n_best: int | None = None,
        rerank: str | bool | None = None,
        length_penalty: float = 1.0,
        hooks: Sequence[Any] | None = None,
        rerank_weight: float = 0.0,
    ) -> CaptionParams:
        """Validate request options against the manifest and limits; defaults documented in the API."""
        name = model or self.manifest.default_captioner
        try:
            cap = self.manifest.captioner(name)
        except KeyError:
            known = ", ".join(c.name for c in self.manifest.captioners)
            raise UnknownModelError("model", f"unknown model {name!r}; captioners: {known}") from None
        beam = self.limits.default_beam_size if beam_size is None else beam_size
        if not 1 <= beam <= self.limits.max_beam_size:
            raise InvalidParameterError("beam_size", f"beam_size must be in [1, {self.limits.max_beam_size}]")
        cap_len = self.max_length_for(cap)
        length = cap_len if max_length is None else max_length
        if not 1 <= length <= cap_len:
            raise InvalidParameterError("max_length", f"max_length must be in [1, {cap_len}] for {cap.name}")
        best = beam if n_best is None else n_best
        if not 1 <= best <= beam:
            raise InvalidParameterError("n_best", f"n_best must be in [1, beam_size={beam}]")
        if not 0.0 <= length_penalty <= 2.0:
            raise InvalidParameterError("length_penalty", "length_penalty must be in [0, 2]")
        ranker: str | None
        if rerank is None or rerank is True:
            ranker = cap.ranker
            if rerank is True and ranker is None:
                raise InvalidParameterError(
                    "rerank", f"{cap.name} has no ranker of its own; name one of {self._rankers()}"
                )
        elif rerank is False:
            ranker = None
        else:
            if rerank not in {r.name for r in self.manifest.rankers}:
                raise UnknownModelError("rerank", f"unknown ranker {rerank!r}; rankers: {self._rankers()}")
            ranker = rerank
        if not 0.0 <= rerank_weight <= MAX_RERANK_WEIGHT:
            raise InvalidParameterError("rerank_weight", f"rerank_weight must be in [0, {MAX_RERANK_WEIGHT}]")
        if rerank_weight and ranker is None:
            raise InvalidParameterError(
                "rerank_weight", "rerank_weight weighs a ranker's order, but this request is not re-ranked"
            )
        plan = self._hook_plan(hooks, beam, length) if hooks else None
        return CaptionParams(
            cap.name, beam, length, best, float(length_penalty), ranker, plan, float(rerank_weight)
        )

    def _hook_plan(self, hooks: Sequence[Any], beam_size: int, max_length: int) -> HookPlan:
        """Validated hooks of one request; a bad spec raises ``InvalidParameterError`` naming it."""
        metrics = self.metrics

        def applied(name: str, _rows: int) -> None:
            if metrics is not None:
                metrics.hook_applications.labels(hook=name).inc()

        try:
            plan = build_hooks(hooks, self.vocab, on_apply=applied)
            plan.check(beam_size, max_length)
        except HookError as exc:
            raise InvalidParameterError(".".join(str(p) for p in exc.loc), str(exc)) from None
        return plan

    def _rankers(self) -> str:
        return ", ".join(r.name for r in self.manifest.rankers) or "(none)"

    # -- pipeline ---------------------------------------------------------------------------------

    async def caption(
        self, images: np.ndarray, params: CaptionParams, timeout_s: float = 60.0
    ) -> CaptionOutput:
        """Caption uint8 [B, H, W, 3] images, within ``timeout_s`` (``TimeoutError`` otherwise)."""
        h, w = self.manifest.image.height, self.manifest.image.width
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (h, w, 3) or not len(images):
            raise ValueError(f"images must be uint8 [B>=1, {h}, {w}, 3], got {images.dtype} {images.shape}")
        if self.scheduling is None:
            async with asyncio.timeout(timeout_s):
                return await self.caption_alone(images, params)
        rows = len(images) * params.beam_size
        if rows > self.scheduling.max_rows:
            raise InvalidParameterError(
                "beam_size",
                f"images × beam_size = {rows} exceeds the scheduler's max_rows = {self.scheduling.max_rows}",
            )
        plan = params.hooks
        searches = [self._decode_request(images, params, substitute=True)]
        if plan is not None and plan.return_original:
            searches.append(self._decode_request(images, params, substitute=False))
        scheduler = self.scheduler(params.captioner)
        try:
            done = await asyncio.gather(*(scheduler.submit(r, timeout_s) for r in searches))
        except QueueFullError as exc:
            raise OverloadedError(exc.retry_after_s) from None
        if self.metrics is not None:
            self.metrics.captions_served.labels(model=params.captioner).inc(len(images))
        ordered = [self._ordered(d.hypotheses, d.ranker_scores, params) for d in done]
        return CaptionOutput(
            params=params,
            results=ordered[0],
            timings_ms=done[0].timings_ms,
            original=ordered[1] if len(ordered) > 1 else None,
        )

    def _decode_request(self, images: np.ndarray, params: CaptionParams, substitute: bool) -> DecodeRequest:
        kwargs: dict[str, Any] = {} if params.hooks is None else params.hooks.search_kwargs(substitute)
        return DecodeRequest(
            images=images,
            beam_size=params.beam_size,
            max_length=params.max_length,
            n_best=params.search_n_best,
            length_penalty=params.length_penalty,
            ranker=params.ranker,
            logits_hook=kwargs.get("logits_hook"),
            groups=kwargs.get("groups", 1),
            diversity_penalty=kwargs.get("diversity_penalty", 0.0),
        )

    def _ordered(
        self, hypotheses: list[list[Hypothesis]], scores: list[list[float]] | None, params: CaptionParams
    ) -> list[list[Caption]]:
        """Per image, the ``n_best`` captions in final order (re-ranked when ``scores`` are given)."""
        return [
            self._order(per, None if scores is None else scores[i], params.rerank_weight)[: params.n_best]
            for i, per in enumerate(hypotheses)
        ]

    async def caption_alone(self, images: np.ndarray, params: CaptionParams) -> CaptionOutput:
        """Caption uint8 [B, H, W, 3] images with no cross-request batching (the naive baseline)."""
        cap = self.manifest.captioner(params.captioner)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        regions = (await self.backend.infer("visual_encoder", {"image": images}))["regions"]
        init = await self.backend.infer(cap.init, {"regions": regions})
        memory = np.ascontiguousarray(init["memory"], dtype=np.float32)
        state0 = np.ascontiguousarray(init["state"], dtype=np.float32)
        t1 = time.perf_counter()
        timings["encode"] = (t1 - t0) * 1e3

        hyps = await self._search_alone(cap, memory, state0, len(images), params, substitute=True)
        original = None
        if params.hooks is not None and params.hooks.return_original:
            original = await self._search_alone(cap, memory, state0, len(images), params, substitute=False)
        t2 = time.perf_counter()
        timings["decode"] = (t2 - t1) * 1e3

        scores = await self._scores(params, regions, hyps)
        results = self._ordered(hyps, scores, params)
        if original is not None:
            original_out = self._ordered(original, await self._scores(params, regions, original), params)
        timings["rerank"] = (time.perf_counter() - t2) * 1e3
        if self.metrics is not None:
            self.metrics.captions_served.labels(model=cap.name).inc(len(images))
        return CaptionOutput(
            params=params,
            results=results,
            timings_ms=timings,
            original=original_out if original is not None else None,
        )

    async def _scores(
        self, params: CaptionParams, regions: np.ndarray, hyps: list[list[Hypothesis]]
    ) -> list[list[float]] | None:
        if params.ranker is None:
            return None
        ranker = self.manifest.ranker(params.ranker)
        return await ranker_scores(
            self.backend, self.manifest, ranker, regions, [[h.tokens for h in per] for per in hyps]
        )

    async def _search_alone(
        self,
        cap: CaptionerEntry,
        memory: np.ndarray,
        state0: np.ndarray,
        n_images: int,
        params: CaptionParams,
        substitute: bool,
    ) -> list[list[Hypothesis]]:
        kwargs: dict[str, Any] = {} if params.hooks is None else params.hooks.search_kwargs(substitute)
        return await beam_search_async(
            self._step_fn(cap, memory),
            n_images=n_images,
            beam_size=params.beam_size,
            max_length=params.max_length,
            bos=self.manifest.vocabulary.bos_id,
            eos=self.manifest.vocabulary.eos_id,
            n_best=params.search_n_best,
            length_penalty=params.length_penalty,
            initial_state=state0,
            banned_ids=self.banned,
            on_step=self._observe_rows(cap.step),
            **kwargs,
        )

    def _step_fn(self, cap: CaptionerEntry, memory: np.ndarray) -> AsyncStepFn:
        backend, model = self.backend, cap.step
        last_token = cap.reads == "last_token"
        fixed_t = None if last_token else fixed_dim(self.manifest, cap.step, "tokens", 1)
        pad = self.manifest.vocabulary.pad_id

        async def step(
            tokens: np.ndarray, lengths: np.ndarray, state: np.ndarray, image_index: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray]:
            if last_token:  # the LSTM reads only the last real token: send T = 1
                tokens = tokens[np.arange(len(tokens)), lengths - 1][:, None]
                lengths = np.ones_like(lengths)
            elif fixed_t is not None and tokens.shape[1] < fixed_t:
                padded = np.full((len(tokens), fixed_t), pad, dtype=np.int64)
                padded[:, : tokens.shape[1]] = tokens
                tokens = padded
            out = await backend.infer(
                model,
                {
                    "memory": memory,
                    "image_index": image_index,
                    "tokens": np.ascontiguousarray(tokens, dtype=np.int64),
                    "length": lengths,
                    "state": np.ascontiguousarray(state, dtype=np.float32),
                },
            )
            return out["logprobs"], out["state_out"]

        return step

    def _observe_rows(self, model: str) -> Callable[[int], None]:
        metrics = self.metrics

        def observe(rows: int) -> None:
            if metrics is not None:
                metrics.beam_rows.labels(model=model).observe(rows)

        return observe

    def _order(self, hyps: list[Hypothesis], scores: list[float] | None, weight: float) -> list[Caption]:
        order = range(len(hyps)) if scores is None else rerank_order(scores, [h.score for h in hyps], weight)
        return [
            Caption(
                text=self.vocab.decode(hyps[i].tokens),
                tokens=hyps[i].tokens,
                logprob=hyps[i].logprob,
                normalized_logprob=hyps[i].score,
                ranker_score=None if scores is None else scores[i],
                beam_rank=i + 1,
            )
            for i in order
        ]


__all__ = [
    "Caption",
    "CaptionEngine",
    "CaptionOutput",
    "CaptionParams",
    "EngineError",
    "EngineLimits",
    "InvalidParameterError",
    "OverloadedError",
    "SchedulerLimits",
    "UnknownModelError",
    "length_norm",
]
