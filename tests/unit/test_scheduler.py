"""The cross-request scheduler against real onnxruntime sessions of the tiny repository.

``CountingBackend`` and ``FailingBackend`` wrap the real backend (every call still runs the real
model); they only count calls or inject one failure, to observe batching and error isolation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.backends.base import BackendError
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.engine.captioning import CaptionEngine, CaptionParams, SchedulerLimits
from service.engine.scheduler import DecodeRequest, QueueFullError
from service.manifest import Manifest, load_manifest
from service.text.vocabulary import Vocabulary


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


class FailingBackend(CountingBackend):
    """Fails the first ``<cap>_step`` call after ``arm()``."""

    armed = False

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.armed and model.endswith("_step"):
            self.armed = False
            raise BackendError(model, "runtime", "injected failure")
        return await super().infer(model, inputs)


@pytest.fixture(scope="module")
def manifest(tiny_repo: Path) -> Manifest:
    return load_manifest(tiny_repo)


@pytest.fixture(scope="module")
def ort_backend(tiny_repo: Path, manifest: Manifest) -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend(tiny_repo, manifest, threads=1)


def images(manifest: Manifest, n: int, seed: int) -> np.ndarray:
    h, w = manifest.image.height, manifest.image.width
    return np.random.default_rng(seed).integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)


def engine(
    backend: Any, tiny_repo: Path, manifest: Manifest, limits: SchedulerLimits | None
) -> CaptionEngine:
    vocab = Vocabulary.load(tiny_repo / manifest.vocabulary.file)
    return CaptionEngine(backend, manifest, vocab, scheduling=limits)


def tokens(out: Any) -> list[list[list[int]]]:
    return [[c.tokens for c in per] for per in out.results]


def test_concurrent_requests_match_decoding_alone(
    ort_backend: OnnxRuntimeBackend, tiny_repo: Path, manifest: Manifest
) -> None:
    counting = CountingBackend(ort_backend)
    batched = engine(counting, tiny_repo, manifest, SchedulerLimits())
    alone = engine(ort_backend, tiny_repo, manifest, None)
    cases: list[tuple[np.ndarray, CaptionParams]] = []
    for i in range(8):
        model = ["butr", "butd"][i % 2]
        params = batched.resolve(
            model=model,
            beam_size=1 + i % 5,
            n_best=1 + i % 5,
            max_length=3 + i,
            rerank="vsepp" if i % 3 else False,
        )
        cases.append((images(manifest, 1 + i % 3, seed=i), params))

    async def run() -> tuple[list[Any], list[Any]]:
        together = await asyncio.gather(*(batched.caption(x, p) for x, p in cases))
        one_by_one = [await alone.caption(x, p) for x, p in cases]
        await batched.close()
        return together, one_by_one

    together, one_by_one = asyncio.run(run())
    for got, want in zip(together, one_by_one, strict=True):
        assert tokens(got) == tokens(want)
        for g, w in zip(got.results, want.results, strict=True):
            assert [c.ranker_score is None for c in g] == [c.ranker_score is None for c in w]
            np.testing.assert_allclose(
                [c.normalized_logprob for c in g], [c.normalized_logprob for c in w], atol=1e-4
            )
    steps = [rows for model, rows in counting.calls if model.endswith("_step")]
    per_request_steps = sum(p.max_length + 1 for _, p in cases)
    assert len(steps) < per_request_steps / 2, "step calls were not shared across requests"
    encoder_calls = [rows for model, rows in counting.calls if model == "visual_encoder"]
    assert len(encoder_calls) < len(cases), "encoder calls of concurrent requests were not batched"


def test_queue_full_and_cancellation_free_rows(
    ort_backend: OnnxRuntimeBackend, tiny_repo: Path, manifest: Manifest
) -> None:
    eng = engine(ort_backend, tiny_repo, manifest, SchedulerLimits(max_rows=10, max_queue=2, max_active=1))
    sched = eng.scheduler("butd")

    def request(seed: int) -> DecodeRequest:
        return DecodeRequest(images(manifest, 1, seed), beam_size=5, max_length=8, n_best=1)

    async def run() -> None:
        # max_active 1: one decodes, two wait, the fourth finds the queue full
        tasks = [asyncio.create_task(sched.submit(request(0), timeout_s=30))]
        while sched.active_requests < 1:
            await asyncio.sleep(0)
        tasks += [asyncio.create_task(sched.submit(request(i), timeout_s=30)) for i in (1, 2)]
        while sched.queue_length < 2:
            await asyncio.sleep(0)
        with pytest.raises(QueueFullError):
            await sched.submit(request(9), timeout_s=30)
        results = await asyncio.gather(*tasks)
        assert all(len(r.hypotheses[0]) == 1 for r in results)
        # a request whose caller gives up is dropped and its rows are freed
        with pytest.raises(TimeoutError):
            await sched.submit(request(5), timeout_s=1e-4)
        for _ in range(100):
            if sched._reserved_rows == 0 and sched.active_requests == 0:
                break
            await asyncio.sleep(0.01)
        assert sched._reserved_rows == 0 and sched.active_requests == 0
        again = await sched.submit(request(6), timeout_s=30)
        assert again.hypotheses[0]
        await eng.close()

    asyncio.run(run())


def test_backend_failure_fails_its_batch_and_the_loop_keeps_serving(
    ort_backend: OnnxRuntimeBackend, tiny_repo: Path, manifest: Manifest
) -> None:
    failing = FailingBackend(ort_backend)
    eng = engine(failing, tiny_repo, manifest, SchedulerLimits())
    params = eng.resolve(model="butd", beam_size=3, max_length=6)

    async def run() -> None:
        failing.armed = True
        with pytest.raises(BackendError):
            await eng.caption(images(manifest, 1, 0), params)
        out = await eng.caption(images(manifest, 1, 0), params)
        assert out.results[0]
        assert eng.scheduler("butd")._reserved_rows == 0
        await eng.close()

    asyncio.run(run())


def test_rows_over_budget_are_refused(
    ort_backend: OnnxRuntimeBackend, tiny_repo: Path, manifest: Manifest
) -> None:
    from service.engine.captioning import InvalidParameterError

    eng = engine(ort_backend, tiny_repo, manifest, SchedulerLimits(max_rows=8))
    params = eng.resolve(model="butd", beam_size=5)
    with pytest.raises(InvalidParameterError, match="max_rows"):
        asyncio.run(eng.caption(images(manifest, 2, 0), params))
