"""``RemoteEngine`` ↔ ``EngineCore`` over a real Unix socket, in one process (the tiny repository):
the same captions and step events as the engine itself, the engine's errors back as the same
exceptions, a cancelled request cancelled in the core, a core that goes away a ``BackendError``
(unavailable) at once, and a core that comes back used again without a restart."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import numpy as np
import pytest

from service.backends.base import BackendError
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.core import EngineCore, failure
from service.engine.core_client import RemoteEngine, raised
from service.engine.engine import CaptionEngine
from service.engine.observer import StepEvent
from service.engine.params import InvalidParameterError, OverloadedError, SearchParams, UnknownModelError
from service.engine.wire import Done, Submit, frame, pack, read_message, unpack
from service.manifest import load_manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary


class Slowed:
    """The backend, each call ``delay`` s late (a request that is still decoding when it is cancelled)."""

    def __init__(self, inner: OnnxRuntimeBackend) -> None:
        self.inner, self.delay = inner, 0.0

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        await asyncio.sleep(self.delay)
        return await self.inner.infer(model, inputs)

    async def close(self) -> None:
        await self.inner.close()


def tokens(out: object) -> list[list[list[int]]]:
    return [[c.tokens for c in per] for per in out.results]  # type: ignore[attr-defined]


def test_errors_cross_as_the_same_exceptions() -> None:
    for exc in (
        OverloadedError(3.0),
        UnknownModelError("model", "unknown model 'x'"),
        InvalidParameterError("hooks.0.params.n", "must be >= 1"),
        TimeoutError("deadline exceeded"),
        BackendError("butr_step", "runtime", "boom"),
        ValueError("images must be uint8"),
    ):
        back = raised(failure(7, exc))
        assert type(back) is type(exc), exc
        assert str(exc) in str(back) or str(back) in str(exc)
        if isinstance(exc, InvalidParameterError | UnknownModelError):
            assert back.field == exc.field  # type: ignore[attr-defined]
    assert raised(failure(7, OverloadedError(3.0))).retry_after_s == 3.0  # type: ignore[attr-defined]
    assert isinstance(raised(failure(7, KeyError("x"))), RuntimeError)


def test_a_frame_round_trips_images_bit_for_bit() -> None:
    images = np.random.default_rng(0).integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    message = Submit(
        3, pack(images), {"model": "m", "hooks": [{"name": "x", "params": {"n": 2}}]}, 9.5, 1, True
    )

    async def run() -> object:
        reader = asyncio.StreamReader()
        reader.feed_data(frame(message) + frame(Done(3, [], {}, 0)))
        reader.feed_eof()
        return [await read_message(reader), await read_message(reader), await read_message(reader)]

    got, done, end = asyncio.run(run())  # type: ignore[misc]
    assert got == message and np.array_equal(unpack(got.images), images) and done.id == 3 and end is None


def test_the_remote_engine_captions_as_the_engine_does(tiny_repo: Path) -> None:
    manifest = load_manifest(tiny_repo)
    vocab = Vocabulary.load(tiny_repo / manifest.vocabulary.file)
    settings = Settings(repo=tiny_repo, intra_op_threads=1)
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (2, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)

    async def run() -> None:
        backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=1, device="cpu")
        slowed = Slowed(backend)
        engine = CaptionEngine(slowed, manifest, vocab, settings)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "core.sock"
            core = EngineCore(engine, "onnxruntime", backend.devices)
            states: list[bool] = []
            remote = RemoteEngine(path, manifest, vocab, settings, on_connected=states.append)
            assert not await remote.wait_connected(0.2)
            with pytest.raises(BackendError) as away:
                await remote.caption(images, remote.resolve())
            assert away.value.reason == "unavailable"
            await core.start(path)
            assert await remote.wait_connected(10) and remote.devices == backend.devices
            for options in (
                {},
                {"model": "butd", "beam_size": 3, "hooks": [{"name": "no_repeat_ngram", "params": {"n": 2}}]},
                {"beam_size": 4, "hooks": [{"name": "diverse_beam", "params": {"groups": 2}}]},
            ):
                params = remote.resolve(**options)
                there, here = await asyncio.gather(
                    remote.caption(images, params), engine.caption(images, params)
                )
                assert tokens(there) == tokens(here) and there.iterations == here.iterations
            seen: list[StepEvent] = []
            observed = await remote.caption(images[:1], remote.resolve(beam_size=2), observer=seen.append)
            assert len(seen) == observed.iterations and seen[0].attention is not None
            assert seen[0].logprobs.shape[1] == len(vocab)
            with pytest.raises(InvalidParameterError):  # refused by the core, raised here as the engine would
                await remote.caption(images, SearchParams(model="butr", beam_size=2, n_best=1, max_length=99))
            slowed.delay = 0.05
            slow = asyncio.create_task(remote.caption(images, remote.resolve(beam_size=3)))
            for _ in range(200):
                if core._tasks:
                    break
                await asyncio.sleep(0.01)
            assert core._tasks, "the request reached the core"
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            for _ in range(200):  # the core cancels it too
                if not core._tasks:
                    break
                await asyncio.sleep(0.01)
            assert not core._tasks
            slowed.delay = 0.0
            await core.drain(5)  # the core goes away: the connection drops, captions fail at once
            for _ in range(200):
                if not remote.connected:
                    break
                await asyncio.sleep(0.01)
            assert not remote.connected
            core = EngineCore(engine, "onnxruntime", backend.devices)
            await core.start(path)  # and comes back: the client reconnects by itself
            assert await remote.wait_connected(10)
            assert states == [True, False, True], "the gateway's ready gauge follows the core"
            again = await remote.caption(images, remote.resolve())
            assert tokens(again) == tokens(await engine.caption(images, remote.resolve()))
            await remote.close()
            await core.drain(5)
        await engine.close()
        await backend.close()

    asyncio.run(run())
