"""``BeamBatch`` (all requests in one set of arrays) equals ``BeamSearch`` run per request, token for
token, with requests joining at different steps, different beam sizes, lengths, length penalties and
hooks — on the toy prefix-conditioned model of ``test_beam``."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine.beam import BeamSearch, Hypothesis
from service.engine.beam_batch import BeamBatch
from service.engine.hooks import BanWords, NoRepeatNgram
from tests.unit.test_beam import BANNED, BOS, EOS, V, toy_logprobs


def toy_step(image_ids: np.ndarray, tokens: np.ndarray, lengths: np.ndarray, state: np.ndarray) -> tuple:
    rows = [
        toy_logprobs(int(image_ids[n]), tuple(int(x) for x in tokens[n, 1 : lengths[n]]))
        for n in range(tokens.shape[0])
    ]
    return (np.stack(rows) if rows else np.zeros((0, V), np.float32)), state + 1.0


def solo(image_ids: list[int], **kw: object) -> list[list[Hypothesis]]:
    n_best = int(kw.pop("n_best"))  # type: ignore[call-overload]
    search = BeamSearch(
        n_images=len(image_ids),
        bos=BOS,
        eos=EOS,
        initial_state=np.zeros((len(image_ids), 2), np.float32),
        banned_ids=BANNED,
        **kw,  # type: ignore[arg-type]
    )
    ids = np.asarray(image_ids)
    while not search.finished:
        r = search.rows()
        logprobs, state = toy_step(ids[r.image_index], r.tokens, r.lengths, r.state)
        search.advance(r, logprobs, state)
    return search.results(n_best)


REQUESTS = [  # (join at step, image ids, options)
    (0, [0, 1], {"beam_size": 3, "max_length": 4, "n_best": 3}),
    (0, [2], {"beam_size": 1, "max_length": 5, "n_best": 1}),
    (1, [3, 4, 5], {"beam_size": 5, "max_length": 3, "n_best": 2, "length_penalty": 0.0}),
    (2, [6], {"beam_size": 4, "max_length": 6, "n_best": 4, "min_length": 3}),
    (2, [7], {"beam_size": 4, "max_length": 5, "n_best": 4, "logits_hook": BanWords([5])}),
    (4, [8, 9], {"beam_size": 2, "max_length": 6, "n_best": 2, "length_penalty": 2.0}),
    (5, [10], {"beam_size": 5, "max_length": 6, "n_best": 5, "logits_hook": NoRepeatNgram(1)}),
]


def test_batch_equals_each_request_alone() -> None:
    batch = BeamBatch(beam_capacity=5, length_capacity=6, bos=BOS, eos=EOS, banned_ids=BANNED)
    images = np.zeros(0, dtype=np.int64)  # toy image id per batch image, kept aligned with the batch
    results: dict[int, list[list[Hypothesis]]] = {}
    steps: dict[int, int] = {}
    pending = list(enumerate(REQUESTS))
    step = 0
    while pending or batch.keys:
        for key, (join, ids, opts) in [p for p in pending if p[1][0] <= step]:
            kw = {k: v for k, v in opts.items() if k != "n_best"}
            memory = np.asarray(ids, dtype=np.float32)[:, None, None]  # carries the toy image id
            batch.add(key, memory, np.zeros((len(ids), 2), np.float32), **kw)  # type: ignore[arg-type]
            pending.remove((key, (join, ids, opts)))
        step += 1
        if not batch.keys:
            continue
        assert batch.memory is not None
        images = batch.memory[:, 0, 0].astype(np.int64)
        r = batch.rows()
        logprobs, state = toy_step(images[r.image_index], r.tokens, r.lengths, r.state)
        for key in batch.advance(r, logprobs, state):
            steps[key] = batch.steps[key]
            results[key] = batch.pop(key, int(REQUESTS[key][2]["n_best"]))  # type: ignore[call-overload]
    for key, (_, ids, opts) in enumerate(REQUESTS):
        want = solo(ids, **dict(opts))
        assert results[key] == [
            [Hypothesis(h.tokens, pytest.approx(h.logprob), pytest.approx(h.score)) for h in per]  # type: ignore[arg-type]
            for per in want
        ], f"request {key} differs"
        assert [[h.tokens for h in per] for per in results[key]] == [[h.tokens for h in per] for per in want]


def test_rows_carry_each_request_prefix_and_discard_frees_images() -> None:
    batch = BeamBatch(beam_capacity=3, length_capacity=4, bos=BOS, eos=EOS, banned_ids=BANNED)
    batch.add(1, np.zeros((2, 1, 1), np.float32), np.zeros((2, 2), np.float32), beam_size=3, max_length=4)
    r = batch.rows()
    assert r.rows.tolist() == [0, 3] and r.tokens.tolist() == [[BOS], [BOS]]
    batch.advance(r, np.stack([toy_logprobs(0, ()), toy_logprobs(1, ())]), r.state)
    batch.add(2, np.ones((1, 1, 1), np.float32), np.zeros((1, 2), np.float32), beam_size=2, max_length=4)
    r = batch.rows()
    assert r.lengths.tolist() == [2] * 6 + [1]  # request 1 at step 1 (3 beams x 2 images), request 2 new
    assert r.tokens.shape == (7, 2) and r.tokens[-1].tolist() == [BOS, 0]
    batch.discard(1)
    assert batch.n_images == 1 and batch.memory is not None and batch.memory.shape[0] == 1
    with pytest.raises(ValueError, match="beam_size"):
        batch.add(3, np.zeros((1, 1, 1), np.float32), np.zeros((1, 2), np.float32), beam_size=4, max_length=2)
