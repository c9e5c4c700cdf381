"""``SearchParams.options()``: what crosses to an engine core in another process. Resolving a request's
options, then its params' options again, gives the same params (processors of the same kinds, in the
same order, acting the same); params whose processors were built in code are refused. The
``force_words`` hook (explanations of a client's caption) forces exactly its ids, then the end."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from service.engine.engine import CaptionEngine
from service.engine.params import InvalidParameterError, SearchParams
from service.engine.processors import BanWords
from service.manifest import load_manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary
from tests.unit.engine.test_scheduler import MIXED


class NoBackend:
    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise AssertionError("resolving options runs no model")

    async def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def engine(tiny_repo: Path) -> CaptionEngine:
    manifest = load_manifest(tiny_repo)
    vocab = Vocabulary.load(tiny_repo / manifest.vocabulary.file)
    return CaptionEngine(NoBackend(), manifest, vocab, Settings(repo=tiny_repo, intra_op_threads=1))


def same(a: SearchParams, b: SearchParams) -> None:
    for f in dataclasses.fields(SearchParams):
        if f.name != "processors":
            assert getattr(a, f.name) == getattr(b, f.name), f.name
    assert [type(p) for p in a.processors] == [type(p) for p in b.processors]
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 20, (3, 4)).astype(np.int64)
    logprobs = np.log(rng.dirichlet(np.ones(len(engine_vocab)), 3)).astype(np.float32)
    for p, q in zip(a.processors, b.processors, strict=True):
        np.testing.assert_array_equal(p(tokens, logprobs.copy()), q(tokens, logprobs.copy()))


engine_vocab: list[int] = []


def test_options_resolve_to_the_same_params(engine: CaptionEngine) -> None:
    engine_vocab[:] = range(len(engine.vocab))
    forced = {
        "model": "butd",
        "beam_size": 1,
        "max_length": 3,
        "hooks": [{"name": "force_words", "params": {"ids": [5, 6, 7]}}],
    }
    for options in [*MIXED, {}, forced]:
        params = engine.resolve(**options)
        assert params.hooks == tuple(
            {"name": h["name"], "params": h["params"]} for h in options.get("hooks", [])
        )
        again = engine.resolve(**params.options())
        same(params, again)
        assert again.options() == params.options()


def test_params_built_in_code_do_not_cross(engine: CaptionEngine) -> None:
    built = dataclasses.replace(engine.resolve(), processors=(BanWords([5]),))
    with pytest.raises(ValueError, match="built in code"):
        built.options()


def test_force_words_forces_its_ids_then_the_end(engine: CaptionEngine) -> None:
    params = engine.resolve(
        beam_size=1, max_length=2, hooks=[{"name": "force_words", "params": {"ids": [5, 9]}}]
    )
    (force,) = params.processors
    logprobs = np.zeros((1, len(engine.vocab)), np.float32)
    eos = engine.vocabs[params.model].eos_id
    for t, want in enumerate([5, 9, eos]):
        out = force(np.ones((1, t + 1), np.int64), logprobs)
        assert np.flatnonzero(np.isfinite(out[0])).tolist() == [want]
    with pytest.raises(InvalidParameterError, match="ids"):
        engine.resolve(hooks=[{"name": "force_words", "params": {"ids": []}}])
    with pytest.raises(InvalidParameterError, match="not a word id"):
        engine.resolve(hooks=[{"name": "force_words", "params": {"ids": [eos]}}])
