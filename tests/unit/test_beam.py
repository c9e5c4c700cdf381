"""Beam search against exhaustive search on a toy model with a prefix-conditioned log-prob table."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from typing import Any

import numpy as np
import pytest

from service.engine.beam import BeamSearch, beam_search, beam_search_async, beam_step

PAD, BOS, EOS, UNK = 0, 1, 2, 3
V = 7  # words 4, 5, 6
WORDS = (4, 5, 6)
BANNED = (PAD, BOS, UNK)


def toy_logprobs(image: int, prefix: tuple[int, ...]) -> np.ndarray:
    """Deterministic pseudo-random log-softmax over V conditioned on (image, prefix)."""
    seed = zlib.crc32(repr((image, prefix)).encode())
    logits = np.random.default_rng(seed).normal(scale=2.0, size=V)
    logits[list(BANNED)] -= 1.0
    out = logits - np.log(np.exp(logits).sum())
    return out.astype(np.float32)


def make_step_fn(image_ids: list[int], calls: list[int] | None = None):
    def step_fn(tokens, lengths, state, image_index):
        assert tokens.dtype == np.int64 and lengths.dtype == np.int64 and image_index.dtype == np.int64
        assert tokens.shape[0] == lengths.shape[0] == state.shape[0] == image_index.shape[0]
        if calls is not None:
            calls.append(tokens.shape[0])
        rows = []
        for n in range(tokens.shape[0]):
            prefix = tuple(int(x) for x in tokens[n, : lengths[n]])
            assert prefix[0] == BOS
            rows.append(toy_logprobs(image_ids[int(image_index[n])], prefix[1:]))
        return np.stack(rows), state + 1.0

    return step_fn


def exhaustive(image: int, max_length: int, length_penalty: float) -> list[tuple[list[int], float, float]]:
    """Every caption of 1..max_length words followed by EOS, best normalised score first."""
    out = []
    for n in range(1, max_length + 1):
        for words in itertools.product(WORDS, repeat=n):
            lp = sum(float(toy_logprobs(image, words[:i])[words[i]]) for i in range(n))
            lp += float(toy_logprobs(image, words)[EOS])
            out.append((list(words), lp, lp / n**length_penalty))
    out.sort(key=lambda h: -h[2])
    return out


def run(image_ids, beam_size, max_length, n_best, length_penalty=1.0, calls=None):
    return beam_search(
        make_step_fn(image_ids, calls),
        n_images=len(image_ids),
        beam_size=beam_size,
        max_length=max_length,
        bos=BOS,
        eos=EOS,
        n_best=n_best,
        length_penalty=length_penalty,
        initial_state=np.zeros((len(image_ids), 2), dtype=np.float32),
        banned_ids=BANNED,
    )


@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("max_length", [3, 4])
def test_wide_beam_equals_exhaustive(max_length: int, length_penalty: float) -> None:
    truth = exhaustive(7, max_length, length_penalty)
    beam = len(truth)  # >= number of possible sequences
    n_best = 10
    (hyps,) = run([7], beam, max_length, n_best, length_penalty)
    assert [h.tokens for h in hyps] == [t[0] for t in truth[:n_best]]
    np.testing.assert_allclose([h.logprob for h in hyps], [t[1] for t in truth[:n_best]], rtol=1e-6)
    np.testing.assert_allclose([h.score for h in hyps], [t[2] for t in truth[:n_best]], rtol=1e-6)


@pytest.mark.parametrize("beam_size", [1, 2, 3, 5])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_narrow_beam_never_beats_exhaustive(beam_size: int, length_penalty: float) -> None:
    for image in range(5):
        truth = exhaustive(image, 4, length_penalty)
        (hyps,) = run([image], beam_size, 4, 1, length_penalty)
        best = hyps[0]
        assert best.score <= truth[0][2] + 1e-9
        # the found caption is a real sequence with the score exhaustive search gives it
        match = [t for t in truth if t[0] == best.tokens]
        assert len(match) == 1
        assert best.score == pytest.approx(match[0][2], rel=1e-6)


def test_results_sorted_and_no_specials() -> None:
    (hyps,) = run([3], 4, 4, 4, 1.0)
    scores = [h.score for h in hyps]
    assert scores == sorted(scores, reverse=True)
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps)  # no duplicate beams
    for h in hyps:
        assert 1 <= len(h.tokens) <= 4
        assert set(h.tokens) <= set(WORDS)


def test_multiple_images_equal_one_at_a_time() -> None:
    images = [0, 11, 5, 2]
    together = run(images, 3, 4, 3, 0.7)
    for img, hyps in zip(images, together, strict=True):
        (alone,) = run([img], 3, 4, 3, 0.7)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        np.testing.assert_allclose([h.score for h in hyps], [h.score for h in alone])


def test_first_step_one_row_per_image_and_rows_bounded() -> None:
    calls: list[int] = []
    run([0, 1, 2], 4, 4, 2, 1.0, calls)
    assert calls[0] == 3  # no duplicate beams on the first step
    assert all(c <= 3 * 4 for c in calls)
    assert len(calls) <= 4 + 1  # at most max_length words + the EOS step


def test_length_penalty_changes_preference() -> None:
    # with no normalisation short captions win more often; with a strong penalty longer ones do
    short = [len(run([i], 6, 4, 1, 0.0)[0][0].tokens) for i in range(12)]
    long = [len(run([i], 6, 4, 1, 2.0)[0][0].tokens) for i in range(12)]
    assert sum(long) > sum(short)


def test_async_driver_matches_sync() -> None:
    step = make_step_fn([4, 9])

    async def astep(*args):
        await asyncio.sleep(0)
        return step(*args)

    sync = run([4, 9], 3, 4, 2, 1.0)
    got = asyncio.run(
        beam_search_async(astep, 2, 3, 4, BOS, EOS, 2, 1.0, np.zeros((2, 2), np.float32), BANNED)
    )
    assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in sync]


def test_state_follows_parent_beam() -> None:
    # state counts steps: every live row must have state == number of steps taken so far
    seen: list[float] = []

    def step_fn(tokens, lengths, state, image_index):
        seen.extend(state[:, 0].tolist())
        assert np.all(state[:, 0] == lengths - 1)
        lp = np.stack([toy_logprobs(0, tuple(int(x) for x in t[1:])) for t in tokens])
        return lp, state + 1.0

    beam_search(step_fn, 1, 3, 4, BOS, EOS, 1, 1.0, np.zeros((1, 1), np.float32), BANNED)
    assert seen


def test_beam_step_selects_top_k() -> None:
    cum = np.array([[0.0, -1.0]])
    lp = np.log(np.array([[[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]]]))
    sel = beam_step(cum, lp, eos=0)
    assert sel.parent.tolist() == [[0, 0]] and sel.token.tolist() == [[2, 1]]
    np.testing.assert_allclose(sel.eos_cum, [[np.log(0.1), -1 + np.log(0.5)]])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_images": 0}, "n_images"),
        ({"beam_size": 0}, "beam_size"),
        ({"max_length": 0}, "max_length"),
        ({"length_penalty": -1.0}, "length_penalty"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs: dict, name: str) -> None:
    args: dict[str, Any] = {
        "n_images": 1,
        "beam_size": 2,
        "max_length": 3,
        "bos": BOS,
        "eos": EOS,
        "initial_state": np.zeros((1, 1), np.float32),
    }
    args.update(kwargs)
    if "n_images" in kwargs:
        args["initial_state"] = np.zeros((max(kwargs["n_images"], 0), 1), np.float32)
    with pytest.raises(ValueError, match=name):
        BeamSearch(**args)


def test_n_best_validated() -> None:
    with pytest.raises(ValueError, match="n_best"):
        run([0], 2, 3, 3)
