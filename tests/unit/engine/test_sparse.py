"""A step's best words per row (``RowTopK``) instead of whole rows: the pure parts, and beam search on
them selecting exactly what it selects on whole rows (a toy model of 64 words with distinct log-probs,
requests of several beam sizes, length limits and penalties joining a batch at different steps, in one
batch and in cohorts); too small a ``k`` does not (the bound ``top_k_for`` is needed); a batch whose
requests read whole rows (hooks) refuses a ``RowTopK``."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

from service.engine.beam import Hypothesis
from service.engine.beam_batch import BeamBatch, Joining
from service.engine.cohorts import CohortBatch
from service.engine.params import SearchParams
from service.engine.processors import BanSequences, BanWords, NoRepeatNgram, SynonymSubstitution
from service.engine.sparse import RowTopK, compact, row_top_k, top_k_for

V, PAD, BOS, EOS, UNK = 64, 0, 1, 2, 3
BANNED = (PAD, BOS, UNK)


def toy_logprobs(image: int, prefix: tuple[int, ...]) -> np.ndarray:
    """A deterministic log-softmax over V words given (image, prefix), EOS likelier with length."""
    rng = np.random.default_rng(zlib.crc32(repr((image, prefix)).encode()))
    logits = rng.normal(scale=2.5, size=V)
    logits[EOS] += 0.8 * len(prefix) - 2.0
    return (logits - np.log(np.exp(logits).sum())).astype(np.float32)


def test_row_top_k_and_compact() -> None:
    rows = np.stack([toy_logprobs(i, ()) for i in range(5)])
    top = row_top_k(rows, 4, EOS)
    assert top.shape == (5, V) and top.logprobs.shape == (5, 4)
    for n in range(5):
        assert set(top.tokens[n].tolist()) == set(np.argsort(-rows[n])[:4].tolist())
        assert np.array_equal(top.logprobs[n], rows[n, top.tokens[n]])
    assert np.array_equal(top.eos, rows[:, EOS])
    dense, words = compact(top, EOS)
    assert dense.shape == words.shape == (5, 5)
    assert np.all(words[:, 4] == EOS) and np.array_equal(dense[:, 4], rows[:, EOS])
    for n in range(5):
        assert np.array_equal(words[n, :4], top.tokens[n])
        others = words[n, :4] != EOS
        assert np.allclose(dense[n, :4][others], rows[n, words[n, :4][others]])
        assert np.all(dense[n, :4][~others] == -np.inf), "the end token counts once, in its own column"
    assert top[1:3].logprobs.shape == (2, 4) and top[1:3].vocab == V
    assert top_k_for(5, 3) == 9
    with pytest.raises(ValueError, match=rf"k must be in \[1, {V}\], got {V + 1}"):
        row_top_k(rows, V + 1, EOS)
    with pytest.raises(ValueError, match="eos must have shape"):
        RowTopK(top.logprobs, top.tokens, top.eos[:2], V)


def params(**kw: Any) -> SearchParams:
    return SearchParams(model="toy", **kw)


REQUESTS = [  # (join at step, toy image ids, params)
    (0, [0, 1], params(beam_size=3, max_length=5, n_best=3)),
    (0, [2], params(beam_size=1, max_length=6, n_best=1)),
    (1, [3, 4, 5], params(beam_size=5, max_length=4, n_best=2, length_penalty=0.0)),
    (2, [6], params(beam_size=4, max_length=7, n_best=4, min_length=3)),
    (3, [8, 9], params(beam_size=8, max_length=6, n_best=5, length_penalty=2.0)),
    (4, [10], params(beam_size=2, max_length=3, n_best=2, min_length=0)),
]


def run(requests: list[tuple[int, list[int], SearchParams]], k_of: Any, cohorts: tuple[int, ...] | None):
    """Drive ``requests`` to the end; each step's log-probs whole (``k_of`` None) or as each row's
    ``k_of(batch)`` best words. Results per request key."""
    batch: Any = (
        BeamBatch(8, 8, BOS, EOS, BANNED) if cohorts is None else CohortBatch(8, 8, BOS, EOS, BANNED, cohorts)
    )
    pending = dict(enumerate(requests))
    results: dict[int, list[list[Hypothesis]]] = {}
    step = 0
    while pending or batch.keys:
        now = [key for key, (join, _, _) in pending.items() if join <= step]
        joins = []
        for key in now:
            _, ids, p = pending.pop(key)
            memory = np.zeros((len(ids), 1, 1), np.float32)
            memory[:, 0, 0] = ids
            joins.append(Joining(key, memory, np.zeros((len(ids), 2), np.float32), p))
        batch.add_many(joins)
        step += 1
        if not batch.keys:
            continue
        images = batch.memory[:, 0, 0].astype(np.int64)
        r = batch.rows()
        whole = np.stack(
            [
                toy_logprobs(
                    int(images[r.image_index[n]]), tuple(int(x) for x in r.tokens[n, 1 : r.lengths[n]])
                )
                for n in range(r.rows.shape[0])
            ]
        )
        logprobs = whole if k_of is None else row_top_k(whole, k_of(batch), EOS)
        update = batch.advance(r, logprobs, r.state.host() + 1.0)
        for key in update.finished:
            results[key] = batch.results(key, requests[key][2].n_best)
        batch.discard(*update.finished)
    return results


def same(a: dict[int, list[list[Hypothesis]]], b: dict[int, list[list[Hypothesis]]]) -> bool:
    if sorted(a) != sorted(b):
        return False
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            if [h.tokens for h in x] != [h.tokens for h in y]:
                return False
            if not np.allclose([h.score for h in x], [h.score for h in y], rtol=1e-6, atol=1e-9):
                return False
    return True


@pytest.mark.parametrize("cohorts", [None, (2, 4), ()], ids=["batch", "cohorts", "one-cohort"])
def test_top_k_rows_select_what_whole_rows_select(cohorts: tuple[int, ...] | None) -> None:
    whole = run(REQUESTS, None, cohorts)
    assert sorted(whole) == list(range(len(REQUESTS)))
    sparse = run(REQUESTS, lambda b: top_k_for(b.capacity, len(BANNED)), cohorts)
    assert same(whole, sparse)


def test_too_few_words_per_row_change_the_captions() -> None:
    """The bound is needed: one word per row (greedy's view) loses the beams' second choices."""
    whole = run(REQUESTS, None, None)
    assert not same(whole, run(REQUESTS, lambda b: 1, None))


def hooked_requests() -> list[tuple[int, list[int], SearchParams]]:
    """Requests with every hook that has a candidate form, fresh (a substitution keeps state)."""
    return [
        (0, [0, 1], params(beam_size=3, max_length=6, n_best=3, processors=(BanWords([4, 13, 20]),))),
        (0, [2], params(beam_size=4, max_length=7, n_best=2, processors=(NoRepeatNgram(1),))),
        (1, [3, 4], params(beam_size=5, max_length=6, n_best=5, processors=(NoRepeatNgram(2),))),
        (1, [5], params(beam_size=2, max_length=5, n_best=2, processors=(BanSequences([[10], [11, 12]]),))),
        (
            2,
            [6, 7],
            params(
                beam_size=4,
                max_length=6,
                n_best=4,
                processors=(SynonymSubstitution({w: w + 1 for w in range(4, 64, 2)}),),
            ),
        ),
        (
            2,
            [8],
            params(
                beam_size=3,
                max_length=7,
                n_best=3,
                min_length=2,
                processors=(
                    SynonymSubstitution({w: (w + 1, w + 2) for w in range(5, 60, 3)}),
                    NoRepeatNgram(3),
                ),
            ),
        ),
        (3, [9, 10], params(beam_size=8, max_length=6, n_best=4)),
    ]


@pytest.mark.parametrize("cohorts", [None, (2, 4)], ids=["batch", "cohorts"])
def test_hooks_on_candidates_select_what_they_select_on_whole_rows(cohorts: tuple[int, ...] | None) -> None:
    whole = run(hooked_requests(), None, cohorts)
    assert sorted(whole) == list(range(7))

    def k_of(batch: Any) -> int:
        assert not batch.reads_whole_rows, "every hook here works on candidates"
        return top_k_for(batch.capacity, len(BANNED) + batch.sparse_budget)

    requests = hooked_requests()
    assert same(whole, run(requests, k_of, cohorts))
    for key in (4, 5):
        substitution = requests[key][2].processors[0]
        assert isinstance(substitution, SynonymSubstitution) and substitution.substitutions > 0, "it fired"
    assert requests[5][2].processors[0].pending, "a word of several tokens was forced"  # type: ignore[attr-defined]


def test_without_the_hooks_budget_the_captions_change() -> None:
    """k without room for what the hooks remove (no-repeat bans many words): the bound is needed."""
    whole = run(hooked_requests(), None, None)
    short = run(hooked_requests(), lambda b: 3, None)
    assert not same(whole, short)


def test_a_batch_with_hooks_refuses_top_k_rows() -> None:
    """A hook without a candidate form (a plain function) makes its request read whole rows."""
    batch = BeamBatch(4, 4, BOS, EOS, BANNED)

    def plain(tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        return logprobs

    hooked = params(beam_size=2, n_best=2, max_length=3, processors=(plain,))
    batch.add_many([Joining(0, np.zeros((1, 1, 1), np.float32), np.zeros((1, 2), np.float32), hooked)])
    assert batch.reads_whole_rows
    r = batch.rows()
    top = row_top_k(np.stack([toy_logprobs(0, ())] * r.rows.shape[0]), 4, EOS)
    with pytest.raises(ValueError, match="reads whole log-prob rows"):
        batch.advance(r, top, r.state.host())
