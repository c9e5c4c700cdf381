"""Scheduler lanes (``COMPCAP_SCHEDULER_LANES``): several decoding loops per captioner, each with its own
beam batch, on real onnxruntime sessions of the tiny repository. Requests spread over the lanes, each
decodes what it decodes alone, and the gauges count every lane."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.backends.onnxruntime import OnnxRuntimeBackend
from service.engine.request import Request, RequestStatus
from service.manifest import Manifest
from service.metrics import Metrics
from service.settings import Settings
from service.text.vocabulary import Vocabulary
from tests.unit.test_scheduler import SlowBackend, engine, images


def test_lanes_share_the_requests_and_each_decodes_as_alone(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, made: list[Request]
) -> None:
    async def run() -> None:
        ort = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
        slow = SlowBackend(ort, delay_s=0.01)  # decodes overlap long enough to fill both lanes
        eng = engine(slow, tiny_repo, manifest, vocab, scheduler_lanes=3)
        eng.metrics = Metrics()
        params = eng.resolve(model="butr", beam_size=4, max_length=8, n_best=2)
        pictures = [images(manifest, 1 + i % 2, seed=10 + i) for i in range(6)]
        lanes = eng._schedulers  # filled on first use
        tasks = [asyncio.create_task(eng.caption(p, params)) for p in pictures]
        outs = await asyncio.gather(*tasks)
        assert len(lanes["butr"]) == 3 and all(lane.iterations > 0 for lane in lanes["butr"])
        assert [r.status for r in made] == [RequestStatus.FINISHED] * 6
        alone = engine(ort, tiny_repo, manifest, vocab)
        for picture, out in zip(pictures, outs, strict=True):
            ref = await alone.caption(picture, params)
            assert [[c.tokens for c in per] for per in out.results] == [
                [c.tokens for c in per] for per in ref.results
            ]
        await alone.close()
        await eng.close()

    asyncio.run(run())


def test_the_gauges_add_up_every_lane(tiny_repo: Path, manifest: Manifest, vocab: Vocabulary) -> None:
    async def run() -> None:
        ort = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
        metrics = Metrics()
        eng = engine(SlowBackend(ort, delay_s=0.05), tiny_repo, manifest, vocab, scheduler_lanes=2)
        eng.metrics = metrics
        params = eng.resolve(model="butr", beam_size=3, max_length=10, n_best=1)
        tasks = [asyncio.create_task(eng.caption(images(manifest, 1, seed=i), params)) for i in range(4)]
        gauge = metrics.active_requests.labels(model="butr")
        for _ in range(2000):
            await asyncio.sleep(0.005)
            lanes = eng._schedulers.get("butr", [])
            if lanes and all(lane.active_requests for lane in lanes):
                break
        assert all(lane.active_requests for lane in eng._schedulers["butr"])  # both lanes decode
        assert gauge._value.get() == sum(lane.active_requests for lane in eng._schedulers["butr"])
        await asyncio.gather(*tasks)
        await eng.close()

    asyncio.run(run())


def test_lanes_are_validated() -> None:
    with pytest.raises(ValueError, match="scheduler_lanes"):
        Settings(scheduler_lanes=0)
