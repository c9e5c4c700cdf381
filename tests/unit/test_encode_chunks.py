"""Chunked encoding of an admitted group (``COMPCAP_ENCODE_CHUNK_IMAGES``): smallest requests first, and
a request whose caller left before its chunk started is never encoded. Against real onnxruntime
sessions of the tiny repository; ``GatedBackend`` only holds the first encoder call until the test
lets it go (every call still runs the real model)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from service.engine.encoding import encode_chunks
from service.engine.limits import SchedulerLimits
from service.engine.request import Request, RequestStatus
from service.manifest import Manifest
from service.text.vocabulary import Vocabulary
from tests.unit.test_scheduler import CountingBackend, engine, images

S = RequestStatus


@dataclass
class Sized:
    name: str
    n_images: int


def test_chunks_put_small_requests_first_and_keep_every_request_whole() -> None:
    group = [Sized("big", 4), Sized("a", 1), Sized("mid", 2), Sized("b", 1), Sized("huge", 9)]
    chunks = encode_chunks(group, 4)
    assert [[r.name for r in c] for c in chunks] == [["a", "b", "mid"], ["big"], ["huge"]]
    assert sorted(r.name for c in chunks for r in c) == sorted(r.name for r in group)
    assert all(sum(r.n_images for r in c) <= 4 or len(c) == 1 for c in chunks)
    assert encode_chunks(group, 0) == [group]  # 0: one call, admission order
    assert encode_chunks([], 4) == [] and encode_chunks(group[:1], 1) == [group[:1]]
    with pytest.raises(ValueError, match="max_images"):
        encode_chunks(group, -1)
    with pytest.raises(ValueError, match="encode_chunk_images"):
        SchedulerLimits(8, 8, 8, 8, 8, encode_chunk_images=-1)


class GatedBackend(CountingBackend):
    """Holds the first ``visual_encoder`` call until ``gate`` is set."""

    def __init__(self, inner: object) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if model == "visual_encoder" and not self.gate.is_set():
            self.held.set()
            await self.gate.wait()
        return await super().infer(model, inputs)


@pytest.mark.parametrize("chunk", [2, 0])
def test_a_request_abandoned_before_its_chunk_is_never_encoded(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, made: list[Request], chunk: int
) -> None:
    from service.backends.onnxruntime import OnnxRuntimeBackend

    async def run() -> None:
        gated = GatedBackend(OnnxRuntimeBackend(tiny_repo, manifest, threads=1))
        eng = engine(gated, tiny_repo, manifest, vocab, encode_chunk_images=chunk)
        sched = eng.scheduler("butd")
        params = eng.resolve(model="butd", beam_size=3, max_length=6, n_best=1)
        big = images(manifest, 4, seed=3)
        tasks = [
            asyncio.create_task(sched.submit(big, params, 30)),  # admitted first, encoded last
            asyncio.create_task(sched.submit(images(manifest, 1, seed=1), params, 30)),
            asyncio.create_task(sched.submit(images(manifest, 1, seed=2), params, 30)),
        ]
        await asyncio.wait_for(gated.held.wait(), 30)  # the first encoder call is under way
        tasks[0].cancel()  # the 4-image request's caller leaves
        gated.gate.set()
        small = await asyncio.gather(*tasks[1:])
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]
        encoder = [rows for model, rows in gated.calls if model == "visual_encoder"]
        if chunk:  # the two 1-image requests in one call; the 4-image one never reached the encoder
            assert encoder == [2]
            assert made[0].status is S.CANCELLED and made[0].encoded is None
        else:  # one call for the whole group: its images were encoded with the others
            assert encoder == [6]
        assert [r.status for r in made[1:]] == [S.FINISHED, S.FINISHED]
        # the chunked group decodes what each request decodes alone
        for image_seed, result in zip((1, 2), small, strict=True):
            alone = await sched.submit(images(manifest, 1, seed=image_seed), params, 30)
            assert [h.tokens for h in result.hypotheses[0]] == [h.tokens for h in alone.hypotheses[0]]
        assert sched.active_requests == 0
        await eng.close()

    asyncio.run(run())
