"""The cross-request scheduler, through ``CaptionEngine``, against real onnxruntime sessions of the tiny
repository.

``CountingBackend``, ``GatedBackend`` and ``FailingBackend`` wrap the real backend (every call still
runs the real model); they only count calls, hold step calls at a gate the test opens, or inject one
failure, to observe batching, deadlines and error isolation. Tests synchronise on the gate and on
request states, never on how fast the machine decodes. Request statuses are read from the
``Request`` objects the scheduler creates (recorded by wrapping the class the scheduler module
instantiates): there is no public way to see them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.backends.base import BackendError
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.beam import Hypothesis
from service.engine.engine import CaptionEngine, CaptionOutput
from service.engine.limits import rows_for
from service.engine.observer import StepEvent
from service.engine.params import InvalidParameterError, OverloadedError, SearchParams
from service.engine.request import Priority, Request, RequestStatus
from service.engine.scheduler import QueueFullError
from service.engine.settings import EngineSettings
from service.manifest import Manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary
from tests.unit.engine.test_beam_batch import backtrack

S = RequestStatus


class CountingBackend:
    def __init__(self, inner: OnnxRuntimeBackend) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int]] = []  # (model, batch rows)

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        first = next(iter(inputs.values()))
        rows = len(inputs["image_index"]) if "image_index" in inputs else len(first)
        self.calls.append((model, rows))
        return await self.inner.infer(model, inputs)

    async def close(self) -> None:
        return None


class RecordingBackend(CountingBackend):
    """Keeps the outputs of every step call."""

    def __init__(self, inner: OnnxRuntimeBackend) -> None:
        super().__init__(inner)
        self.steps: list[dict[str, np.ndarray]] = []

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = await super().infer(model, inputs)
        if model.endswith("_step"):
            self.steps.append(out)
        return out


class FailingBackend(CountingBackend):
    """Fails the first ``<cap>_step`` call after ``armed`` is set."""

    armed = False

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.armed and model.endswith("_step"):
            self.armed = False
            raise BackendError(model, "runtime", "injected failure")
        return await super().infer(model, inputs)


class GatedBackend(CountingBackend):
    """Step calls of ``models`` (every captioner's when None) wait at a gate while it is shut, so that a
    test decides when a decode moves on instead of racing the machine's speed: ``parked(model)``
    returns once a step call (of ``model``, or any) waits at the gate, ``release_one(model)`` lets the
    oldest such call through, ``open()`` every call now and later."""

    def __init__(self, inner: OnnxRuntimeBackend, models: tuple[str, ...] | None = None) -> None:
        super().__init__(inner)
        self.models = models
        self.is_shut = False
        self.waiting: list[tuple[str, asyncio.Future[None]]] = []
        self.arrived = asyncio.Event()

    def shut(self) -> None:
        self.is_shut = True

    def open(self) -> None:
        self.is_shut = False
        while self.waiting:
            self.waiting.pop(0)[1].set_result(None)

    def _find(self, model: str | None) -> int | None:
        return next((n for n, (m, _) in enumerate(self.waiting) if model in (None, m)), None)

    def release_one(self, model: str | None = None) -> None:
        found = self._find(model)
        assert found is not None, f"no {model or 'step'} call waits at the gate"
        self.waiting.pop(found)[1].set_result(None)

    async def parked(self, model: str | None = None) -> None:
        while self._find(model) is None:
            self.arrived.clear()
            await self.arrived.wait()

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        gated = model.endswith("_step") if self.models is None else model in self.models
        if gated and self.is_shut:
            waiter = asyncio.get_running_loop().create_future()
            self.waiting.append((model, waiter))
            self.arrived.set()
            await waiter
        return await super().infer(model, inputs)


class GatedRankerBackend(CountingBackend):
    """Ranker text calls wait until ``go`` is set; ``ranking`` is set when the first one arrives."""

    def __init__(self, inner: OnnxRuntimeBackend) -> None:
        super().__init__(inner)
        self.ranking, self.go = asyncio.Event(), asyncio.Event()

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if model.endswith("_text"):
            self.ranking.set()
            await self.go.wait()
        return await super().infer(model, inputs)


@pytest.fixture(scope="module")
def ort_backend(tiny_repo: Path, manifest: Manifest) -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend(tiny_repo, manifest, threads=1)


def images(manifest: Manifest, n: int, seed: int) -> np.ndarray:
    h, w = manifest.image.height, manifest.image.width
    return np.random.default_rng(seed).integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)


def engine(
    backend: Any, tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, **settings: Any
) -> CaptionEngine:
    return CaptionEngine(backend, manifest, vocab, Settings(repo=tiny_repo, intra_op_threads=1, **settings))


def tokens(out: CaptionOutput) -> list[list[list[int]]]:
    return [[c.tokens for c in per] for per in out.results]


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


def spec(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "params": params}


MIXED: list[dict[str, Any]] = [  # mixed captioners, beams, lengths, rankers, diverse groups, processors
    {"model": "butr", "beam_size": 1, "max_length": 4},
    {"model": "butd", "beam_size": 4, "n_best": 2, "max_length": 5, "rerank": "vsepp"},
    {
        "model": "butr",
        "beam_size": 4,
        "n_best": 3,
        "max_length": 9,
        "hooks": [spec("diverse_beam", groups=2)],
    },
    {"model": "butd", "beam_size": 3, "max_length": 7, "length_penalty": 0.5, "rerank": False},
    {"model": "butr", "beam_size": 5, "n_best": 1, "max_length": 12, "rerank": "vsepp"},
    {
        "model": "butd",
        "beam_size": 6,
        "n_best": 4,
        "max_length": 10,
        "hooks": [spec("min_length", min_words=4), spec("diverse_beam", groups=3, diversity_penalty=1.5)],
    },
    {
        "model": "butr",
        "beam_size": 3,
        "max_length": 8,
        "length_penalty": 2.0,
        "rerank": False,
        "hooks": [spec("no_repeat_ngram", n=2), spec("ban_words", words=["a", "on"])],
    },
    {
        "model": "butd",
        "beam_size": 2,
        "max_length": 11,
        "hooks": [
            spec("synonym_substitution", pairs=[["dog", "puppy"], ["man", "guy"]]),
            spec("no_repeat_ngram", n=1),
        ],
    },
    {
        "model": "butr",
        "beam_size": 4,
        "n_best": 2,
        "max_length": 10,
        "rerank": "butr",
        "hooks": [spec("ban_words", words=["the"]), spec("diverse_beam", groups=4, diversity_penalty=0.3)],
    },
    {"model": "butd", "beam_size": 5, "max_length": 16, "hooks": [spec("min_length", min_words=3)]},
]


def mixed_cases(eng: CaptionEngine, manifest: Manifest) -> list[tuple[np.ndarray, SearchParams]]:
    cases = [(images(manifest, 1 + i % 3, seed=i), eng.resolve(**options)) for i, options in enumerate(MIXED)]
    params = [p for _, p in cases]
    assert {p.model for p in params} == {"butr", "butd"} and {p.ranker for p in params} == {
        None,
        "butr",
        "vsepp",
    }
    assert {p.groups for p in params} == {1, 2, 3, 4} and sum(bool(p.processors) for p in params) == 3
    return cases


def test_concurrent_requests_match_decoding_alone(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    counting = CountingBackend(ort_backend)
    batched = engine(counting, tiny_repo, manifest, vocab)
    alone = engine(ort_backend, tiny_repo, manifest, vocab, cross_request_batching=False)
    cases = mixed_cases(batched, manifest)

    async def run() -> tuple[list[CaptionOutput], list[CaptionOutput]]:
        together = await asyncio.gather(*(batched.caption(x, p, timeout_s=120) for x, p in cases))
        one_by_one = [await alone.caption(x, p, timeout_s=120) for x, p in cases]
        await batched.close()
        await alone.close()
        return list(together), one_by_one

    together, one_by_one = asyncio.run(run())
    for (x, p), got, want in zip(cases, together, one_by_one, strict=True):
        assert got.params == p
        assert tokens(got) == tokens(want)
        assert got.iterations == want.iterations  # the same search, step for step
        assert len(got.results) == len(x) and all(len(per) == p.n_best for per in got.results)
        for g, w in zip(got.results, want.results, strict=True):
            assert [c.ranker_score is None for c in g] == [p.ranker is None] * len(g)
            assert [c.ranker_score is None for c in g] == [c.ranker_score is None for c in w]
            np.testing.assert_allclose(
                [c.normalized_logprob for c in g], [c.normalized_logprob for c in w], atol=1e-4
            )
    steps = [rows for model, rows in counting.calls if model.endswith("_step")]
    per_request_steps = sum(out.iterations for out in one_by_one)
    assert len(steps) < per_request_steps / 2, "step calls were not shared across requests"
    assert max(steps) > max(p.rows(len(x)) for x, p in cases)  # one step call held several requests' rows
    encoder_calls = [rows for model, rows in counting.calls if model == "visual_encoder"]
    assert len(encoder_calls) < len(cases), "encoder calls of concurrent requests were not batched"
    assert len(made) == 2 * len(cases) and all(r.status is S.FINISHED and not r.holds_rows for r in made)


def test_queue_full_timeouts_and_cancellation_free_rows(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    gate = GatedBackend(ort_backend)
    eng = engine(gate, tiny_repo, manifest, vocab, max_rows_per_step=10, max_queue=2, max_active_requests=1)
    sched = eng.scheduler("butd")
    params = eng.resolve(model="butd", beam_size=5, max_length=8, n_best=1)
    long = eng.resolve(
        model="butd", beam_size=5, max_length=16, n_best=1, hooks=[spec("min_length", min_words=16)]
    )
    full = eng.resolve(model="butd", beam_size=5, max_length=4, n_best=2)  # x 2 images = every row

    async def run() -> None:
        # max_active 1: one decodes (held at its first step), two wait, the fourth finds the queue full
        gate.shut()
        tasks = [asyncio.create_task(sched.submit(images(manifest, 1, 0), params, 30))]
        await gate.parked()
        tasks += [asyncio.create_task(sched.submit(images(manifest, 1, i), params, 30)) for i in (1, 2)]
        await until(lambda: sched.queue_length == 2)
        with pytest.raises(QueueFullError) as err:
            await sched.submit(images(manifest, 1, 9), params, 30)
        assert err.value.retry_after_s > 0
        with pytest.raises(OverloadedError) as overloaded:
            await eng.caption(images(manifest, 1, 9), params, timeout_s=30)
        assert overloaded.value.retry_after_s > 0 and overloaded.value.code == "overloaded"
        gate.open()
        results = await asyncio.gather(*tasks)
        assert all(len(r.hypotheses) == 1 and len(r.hypotheses[0]) == 1 for r in results)
        assert [r.status for r in made] == [S.FINISHED] * 3
        # a request whose deadline passes at once (before or while it is encoded)
        with pytest.raises(TimeoutError):
            await sched.submit(images(manifest, 1, 5), params, timeout_s=1e-4)
        await until(lambda: made[-1].status.terminal)
        assert made[-1].status is S.CANCELLED
        # a request whose deadline passes while it decodes (held at its second step) frees its rows;
        # the deadline only has to outlast encoding one image
        gate.shut()
        seen: list[int] = []
        task = asyncio.create_task(
            sched.submit(images(manifest, 1, 6), long, 2.0, observer=lambda e: seen.append(int(e.t[0])))
        )
        await gate.parked()
        gate.release_one()
        await gate.parked()
        with pytest.raises(TimeoutError):
            await task
        timed_out = made[-1]
        gate.open()
        await until(lambda: timed_out.status.terminal and sched.active_requests == 0)
        assert seen == [0, 1]  # it was decoding; the step in flight at its deadline was its last
        assert timed_out.status is S.CANCELLED and not timed_out.holds_rows
        # a caller that stops waiting (task cancelled) while its request decodes frees its rows
        gate.shut()
        task = asyncio.create_task(sched.submit(images(manifest, 1, 7), long, 30))
        await gate.parked()
        assert made[-1].status is S.DECODING
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled = made[-1]
        gate.open()
        await until(lambda: cancelled.status.terminal and sched.active_requests == 0)
        assert cancelled.status is S.CANCELLED and not cancelled.holds_rows
        # all the rows are free again: a request needing every one of them is admitted and decoded
        again = await sched.submit(images(manifest, 2, 8), full, 30)
        assert len(again.hypotheses) == 2 and all(len(h) == 2 for h in again.hypotheses)
        assert made[-1].status is S.FINISHED
        await eng.close()

    asyncio.run(run())


def test_backend_failure_fails_its_batch_and_the_loop_keeps_serving(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    failing = FailingBackend(ort_backend)
    eng = engine(failing, tiny_repo, manifest, vocab, max_active_requests=2)
    alone = engine(ort_backend, tiny_repo, manifest, vocab, cross_request_batching=False)
    params = eng.resolve(model="butd", beam_size=3, max_length=6)
    xs = [images(manifest, 1, seed) for seed in range(3)]

    async def run() -> None:
        failing.armed = True
        # all three are submitted before the loop runs: two are admitted and decode together, the third
        # waits (max_active 2); the first step call fails the two, not the third
        outs = await asyncio.gather(
            *(eng.caption(x, params, timeout_s=60) for x in xs), return_exceptions=True
        )
        assert isinstance(outs[0], BackendError) and isinstance(outs[1], BackendError)
        assert isinstance(outs[2], CaptionOutput)
        assert tokens(outs[2]) == tokens(await alone.caption(xs[2], params))
        assert [r.status for r in made[:3]] == [S.FAILED, S.FAILED, S.FINISHED]
        out = await eng.caption(xs[0], params)
        assert tokens(out) == tokens(await alone.caption(xs[0], params))
        assert eng.scheduler("butd").active_requests == 0 and not any(r.holds_rows for r in made)
        await eng.close()
        await alone.close()

    asyncio.run(run())


class Boom(RuntimeError):
    pass


def raising_processor(at: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    calls: list[int] = []

    def proc(tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        calls.append(tokens.shape[0])
        if len(calls) > at:
            raise Boom("processor")
        return np.array(logprobs)

    return proc


def test_a_failing_processor_or_observer_fails_only_its_request(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    eng = engine(ort_backend, tiny_repo, manifest, vocab)
    alone = engine(ort_backend, tiny_repo, manifest, vocab, cross_request_batching=False)
    good = [
        eng.resolve(model="butr", beam_size=4, max_length=8, hooks=[spec("diverse_beam", groups=2)]),
        eng.resolve(model="butr", beam_size=3, max_length=6, rerank=False),
    ]
    base = eng.resolve(model="butr", beam_size=3, max_length=8, hooks=[spec("min_length", min_words=6)])
    bad = dataclasses.replace(base, processors=(*base.processors, raising_processor(at=2)))
    xs = [images(manifest, 2, seed) for seed in (11, 12, 13, 14)]

    def bad_observer(event: StepEvent) -> None:
        if int(event.t[0]) == 3:
            raise Boom("observer")

    async def run() -> None:
        outs = await asyncio.gather(
            eng.caption(xs[0], good[0]),
            eng.caption(xs[1], bad),
            eng.caption(xs[2], good[1]),
            eng.caption(xs[3], base, observer=bad_observer),
            return_exceptions=True,
        )
        assert isinstance(outs[1], Boom) and str(outs[1]) == "processor"
        assert isinstance(outs[3], Boom) and str(outs[3]) == "observer"
        for x, p, out in ((xs[0], good[0], outs[0]), (xs[2], good[1], outs[2])):
            assert isinstance(out, CaptionOutput)
            assert tokens(out) == tokens(await alone.caption(x, p))
        assert [r.status for r in made[:4]] == [S.FINISHED, S.FAILED, S.FINISHED, S.FAILED]
        assert eng.scheduler("butr").active_requests == 0 and not any(r.holds_rows for r in made)
        await eng.close()
        await alone.close()

    asyncio.run(run())


def test_user_requests_are_admitted_before_background_ones(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    gate = GatedBackend(ort_backend)
    eng = engine(gate, tiny_repo, manifest, vocab, max_active_requests=1)
    sched = eng.scheduler("butd")
    params = eng.resolve(model="butd", beam_size=3, max_length=16, hooks=[spec("min_length", min_words=16)])
    admitted: list[str] = []  # the order of the requests' first decoding steps

    def first_step(label: str) -> Callable[[StepEvent], None]:
        def observer(event: StepEvent) -> None:
            if int(event.t[0]) == 0:
                admitted.append(label)

        return observer

    async def run() -> None:
        def caption(label: str, priority: Priority) -> asyncio.Task[CaptionOutput]:
            x = images(manifest, 1, seed=sum(map(ord, label)))
            return asyncio.create_task(eng.caption(x, params, 60, priority, first_step(label)))

        gate.shut()
        tasks = [caption("B1", Priority.BACKGROUND)]
        await gate.parked()  # B1 decodes, held at its first step
        tasks += [caption(label, Priority.BACKGROUND) for label in ("B2", "B3", "B4")]
        tasks.append(caption("U", Priority.USER))
        await until(lambda: sched.queue_length == 4)
        assert admitted == [] and sched.active_requests == 1
        gate.open()
        await asyncio.gather(*tasks)
        await eng.close()

    asyncio.run(run())
    assert admitted == ["B1", "U", "B2", "B3", "B4"]
    assert [r.priority for r in made] == [Priority.BACKGROUND] * 4 + [Priority.USER]
    assert all(r.status is S.FINISHED for r in made)


def test_observer_gets_one_event_per_step_with_the_step_models_attention(
    ort_backend: OnnxRuntimeBackend, tiny_repo: Path, manifest: Manifest, vocab: Vocabulary
) -> None:
    recording = RecordingBackend(ort_backend)
    eng = engine(recording, tiny_repo, manifest, vocab)
    slots = manifest.captioner("butr").memory_dims[0]
    observed = [
        eng.resolve(model="butr", beam_size=4, max_length=10, rerank=False),
        eng.resolve(
            model="butr", beam_size=4, max_length=10, rerank=False, hooks=[spec("diverse_beam", groups=2)]
        ),
    ]
    xs = [images(manifest, 2, 21), images(manifest, 3, 22)]
    events: list[list[StepEvent]] = [[], []]
    solo: list[StepEvent] = []

    async def run() -> list[CaptionOutput]:
        # alone in the engine: every row of every step call is the request's, in the event's order
        await eng.caption(xs[0], observed[0], observer=solo.append)
        outs = await asyncio.gather(
            eng.caption(xs[0], observed[0], observer=events[0].append),
            eng.caption(images(manifest, 1, 23), observed[0]),  # shares the steps, observed by nobody
            eng.caption(xs[1], observed[1], observer=events[1].append),
        )
        await eng.close()
        return [outs[0], outs[2]]

    outs = asyncio.run(run())
    solo_calls = recording.steps[: len(solo)]
    assert len(solo) == len(solo_calls) >= 2
    for e, call in zip(solo, solo_calls, strict=True):
        assert e.attention is not None
        np.testing.assert_array_equal(e.attention, call["attention"])  # the step model's own attention
        finite = np.isfinite(e.logprobs)
        np.testing.assert_array_equal(e.logprobs[finite], call["logprobs"].astype(np.float64)[finite])
    for x, p, out, got in zip(xs, observed, outs, events, strict=True):
        assert len(got) == out.iterations >= 2  # one event per step the request took part in
        n_img, k = len(x), p.beam_size
        for step, e in enumerate(got):
            n = e.image.shape[0]
            assert e.attention is not None and e.attention.shape == (n, slots)
            assert e.attention.dtype == np.float32 and np.isfinite(e.attention).all()
            assert e.logprobs.shape == (n, len(vocab))
            assert e.t.shape == e.done.shape == (n_img,) and e.image.shape == e.beam.shape == (n,)
            for name in ("parent", "token", "token_logprob", "cum", "eos_cum"):
                assert getattr(e, name).shape == (n_img, k), name
            assert ((e.image >= 0) & (e.image < n_img)).all() and ((e.beam >= 0) & (e.beam < k)).all()
            live = ~got[step - 1].done if step else np.ones(n_img, dtype=bool)
            assert (e.t[live] == step).all()
        assert got[-1].done.all()
        for i, per in enumerate(out.results):
            top = per[0]
            assert top.beam_rank == 1
            assert top.tokens in backtrack(
                got, i, Hypothesis(top.tokens, top.logprob, top.normalized_logprob)
            )
    # the first request decoded alone and in company: the same events
    assert len(solo) == len(events[0])
    for a, b in zip(solo, events[0], strict=True):
        np.testing.assert_array_equal(a.token, b.token)
        np.testing.assert_array_equal(a.parent, b.parent)
        np.testing.assert_allclose(a.attention, b.attention, atol=1e-6)  # type: ignore[arg-type]


def test_rows_over_budget_are_refused(
    ort_backend: OnnxRuntimeBackend, tiny_repo: Path, manifest: Manifest, vocab: Vocabulary
) -> None:
    eng = engine(ort_backend, tiny_repo, manifest, vocab, max_rows_per_step=8)
    params = eng.resolve(model="butd", beam_size=5)
    with pytest.raises(InvalidParameterError, match="max_rows") as err:
        asyncio.run(eng.caption(images(manifest, 2, 0), params))
    assert err.value.field == "beam_size"
    with pytest.raises(ValueError, match="exceeds"):
        asyncio.run(eng.scheduler("butd").submit(images(manifest, 2, 0), params, 30))


def test_a_request_whose_caller_gives_up_while_it_is_ranked_ends_cancelled(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    gated = GatedRankerBackend(ort_backend)
    eng = engine(gated, tiny_repo, manifest, vocab)
    params = eng.resolve(model="butr", beam_size=2, max_length=3, rerank="vsepp")

    async def run() -> None:
        task = asyncio.create_task(eng.caption(images(manifest, 1, 31), params, timeout_s=30))
        await gated.ranking.wait()  # decoded; its ranker call waits
        assert made[-1].status is S.RANKING
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gated.go.set()
        await until(lambda: made[-1].status.terminal)
        await eng.close()

    asyncio.run(run())
    assert made[-1].status is S.CANCELLED  # its caller stopped waiting (request.py)


def test_background_requests_hold_at_most_their_row_budget_while_users_decode(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    """``max_background_rows`` = 6: with a user request in the scheduler, two beam-3 background requests
    decode at once, never three; alone, background requests take every row they fit in."""
    gate = GatedBackend(ort_backend)
    eng = engine(gate, tiny_repo, manifest, vocab, max_background_rows=6)
    sched = eng.scheduler("butd")
    long = eng.resolve(model="butd", beam_size=3, max_length=16, hooks=[spec("min_length", min_words=16)])
    short = eng.resolve(model="butd", beam_size=3, max_length=4)
    live = (S.ENCODING, S.DECODING)
    background_live: list[int] = []  # background requests holding rows, at each of the user's steps

    def watch(event: StepEvent) -> None:
        background_live.append(sum(r.priority is Priority.BACKGROUND and r.status in live for r in made))

    async def run() -> int:
        gate.shut()
        user = asyncio.create_task(eng.caption(images(manifest, 1, 1), long, 60, Priority.USER, watch))
        await gate.parked()  # the user decodes, held at its first step while the others queue
        background = [
            asyncio.create_task(eng.caption(images(manifest, 1, 10 + n), long, 60, Priority.BACKGROUND))
            for n in range(4)
        ]
        await until(lambda: sched.queue_length == 4)
        gate.open()  # the next plan admits what the budget allows beside the user's 15 steps to go
        await asyncio.gather(user, *background)
        # no user: four background requests are admitted together
        peak = 0

        def count(event: StepEvent) -> None:
            nonlocal peak
            holding = [r for r in made[5:] if r.priority is Priority.BACKGROUND and r.status in live]
            peak = max(peak, len(holding))

        await asyncio.gather(
            *(
                eng.caption(images(manifest, 1, 20 + n), short, 60, Priority.BACKGROUND, count)
                for n in range(4)
            )
        )
        await eng.close()
        return peak

    peak_alone = asyncio.run(run())
    assert max(background_live) == 2  # the budget was used, and never exceeded
    assert peak_alone == 4
    assert all(r.status is S.FINISHED for r in made)


def test_background_row_budget_is_validated(tiny_repo: Path) -> None:
    with pytest.raises(ValueError, match="max_background_rows"):
        EngineSettings(repo=tiny_repo, max_background_rows=0)
    settings = EngineSettings(repo=tiny_repo, max_rows_per_step=512, max_background_rows=128)
    assert rows_for(settings, Priority.BACKGROUND) == 128 and rows_for(settings, Priority.USER) == 512


def test_background_share_paces_background_requests_while_users_decode(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    """``background_share`` = 0.5: after a background request held rows for t s while a user request
    decoded, the next background request waits about t more before it is admitted."""
    eng = engine(ort_backend, tiny_repo, manifest, vocab, max_background_rows=3, background_share=0.5)
    long = eng.resolve(model="butd", beam_size=3, max_length=16, hooks=[spec("min_length", min_words=16)])
    short = eng.resolve(model="butd", beam_size=3, max_length=3)
    started = asyncio.Event()

    async def run() -> None:
        user = asyncio.create_task(
            eng.caption(images(manifest, 1, 1), long, 60, Priority.USER, lambda e: started.set())
        )
        await started.wait()
        background = [
            eng.caption(images(manifest, 1, 2 + n), short, 60, Priority.BACKGROUND) for n in range(2)
        ]  # queued together: the row budget admits one at a time
        await asyncio.gather(user, *background)
        await eng.close()

    asyncio.run(run())
    user, b1, b2 = made
    held = b1.decode_end - b1.encode_start
    assert held > 0 and b1.decode_end < user.decode_end  # b1 finished while the user decoded
    paced_until = b1.decode_end + 0.8 * held
    # b2 waits out the gap, unless the user left before it ended (then nothing holds it back)
    assert b2.encode_start >= min(paced_until, user.decode_end)
    assert b2.encode_start - b1.decode_end >= 0.8 * held or b2.encode_start >= user.decode_end


def test_background_work_yields_to_users_of_another_captioner(
    ort_backend: OnnxRuntimeBackend,
    tiny_repo: Path,
    manifest: Manifest,
    vocab: Vocabulary,
    made: list[Request],
) -> None:
    """Captioners share the cores: while a user request decodes on ``butd``, background requests on
    ``butr`` (a shadow, a probe of another model) keep the background row budget (3 rows: one beam-3
    request at a time), and are admitted together once the user is gone."""
    gate = GatedBackend(ort_backend)
    eng = engine(gate, tiny_repo, manifest, vocab, max_background_rows=3)
    long = eng.resolve(model="butd", beam_size=3, max_length=16, hooks=[spec("min_length", min_words=16)])
    other = eng.resolve(model="butr", beam_size=3, max_length=8, rerank=False)
    live = (S.ENCODING, S.DECODING)
    during_user: list[int] = []  # background requests on butr holding rows, at each of the user's steps

    def watch(event: StepEvent) -> None:
        during_user.append(sum(r.priority is Priority.BACKGROUND and r.status in live for r in made))

    async def run() -> int:
        gate.shut()
        user = asyncio.create_task(eng.caption(images(manifest, 1, 1), long, 60, Priority.USER, watch))
        await gate.parked("butd_step")  # butd's user decodes, held at its first step
        background = [
            asyncio.create_task(eng.caption(images(manifest, 1, 10 + n), other, 60, Priority.BACKGROUND))
            for n in range(3)
        ]
        await gate.parked("butr_step")  # one background request decodes on butr, held too
        gate.release_one("butd_step")  # the user's first step, with background work beside it
        await gate.parked("butd_step")
        gate.open()
        await asyncio.gather(user, *background)
        peak = 0

        def count(event: StepEvent) -> None:
            nonlocal peak
            peak = max(peak, sum(r.priority is Priority.BACKGROUND and r.status in live for r in made[4:]))

        await asyncio.gather(
            *(
                eng.caption(images(manifest, 1, 20 + n), other, 60, Priority.BACKGROUND, count)
                for n in range(3)
            )
        )
        await eng.close()
        return peak

    peak_alone = asyncio.run(run())
    assert max(during_user) == 1  # yielded to butd's user: one at a time, never more
    assert peak_alone == 3
    assert all(r.status is S.FINISHED for r in made)
