"""The reference oracle (``tests/beam_oracle.py``, the per-request beam search ``BeamBatch`` is checked
against) against exhaustive search on a toy model with a prefix-conditioned log-prob table; the
processors of ``service.engine.processors`` (built by ``service.engine.hooks``) run on it as its
``logits_hook``; diverse beam search."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from service.engine.beam import (
    NEG_INF,
    LogitsHookFn,
    beam_step,
    grouped_beam_step,
    transformers_done,
    transformers_finishing,
)
from service.engine.hooks import resolve_hooks
from service.engine.processors import BanWords, LogitsProcessor, NoRepeatNgram, SynonymSubstitution
from service.text.vocabulary import SPECIALS, Vocabulary
from tests.beam_oracle import BeamSearch, beam_search, beam_search_async

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
    return run_with(image_ids, beam_size, max_length, n_best, length_penalty, calls=calls)


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


# -------------------------------------------------------------------------------------------- hooks
def compose(processors: Sequence[LogitsProcessor], calls: list[int] | None = None) -> LogitsHookFn:
    """A request's processors applied in order, as the oracle's ``logits_hook`` (what ``BeamBatch``
    does with ``SearchParams.processors``); ``calls`` collects the rows of each call."""

    def hook(tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        if calls is not None:
            calls.append(tokens.shape[0])
        for proc in processors:
            logprobs = proc(tokens, logprobs)
        return logprobs

    return hook


def run_with(image_ids, beam_size, max_length, n_best, length_penalty=1.0, calls=None, **kwargs):
    """``beam_search`` on the toy model, with extra keyword arguments (logits_hook, groups,
    diversity_penalty); ``calls`` collects the rows of each step call."""
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
        **kwargs,
    )


def model_logprob(image: int, words: list[int]) -> float:
    """Sum of the toy model's log-probs of ``words`` followed by EOS."""
    lp = sum(float(toy_logprobs(image, tuple(words[:i]))[words[i]]) for i in range(len(words)))
    return lp + float(toy_logprobs(image, tuple(words))[EOS])


def bigrams(words: list[int]) -> list[tuple[int, int]]:
    return list(itertools.pairwise(words))


IMAGES = list(range(12))


def test_ban_words_hook_never_emits_a_banned_word() -> None:
    plain = run_with(IMAGES, 3, 4, 3)
    assert any(4 in h.tokens for hyps in plain for h in hyps)
    banned = run_with(IMAGES, 3, 4, 3, logits_hook=BanWords([4]))
    for img, hyps in zip(IMAGES, banned, strict=True):
        assert hyps
        for h in hyps:
            assert 4 not in h.tokens and set(h.tokens) <= set(WORDS)
            assert h.logprob == pytest.approx(model_logprob(img, h.tokens), rel=1e-6)  # true scores


def test_no_repeat_ngram_hook_removes_repeated_bigrams() -> None:
    def repeats(words: list[int]) -> bool:
        return len(set(bigrams(words))) < len(bigrams(words))

    plain = run_with(IMAGES, 3, 6, 3)
    assert any(repeats(h.tokens) for hyps in plain for h in hyps)  # the toy model repeats itself
    hooked = run_with(IMAGES, 3, 6, 3, logits_hook=NoRepeatNgram(2))
    for hyps in hooked:
        assert hyps
        assert not any(repeats(h.tokens) for h in hyps)


def test_min_length_search_argument() -> None:
    plain = run_with(IMAGES, 3, 5, 3)
    assert any(len(h.tokens) < 3 for hyps in plain for h in hyps)
    longer = run_with(IMAGES, 3, 5, 3, min_length=3)
    for img, hyps in zip(IMAGES, longer, strict=True):
        assert len(hyps) == 3
        for h in hyps:
            assert 3 <= len(h.tokens) <= 5
            assert h.logprob == pytest.approx(model_logprob(img, h.tokens), rel=1e-6)  # true scores
    # the JSON ``min_length`` hook is that search argument, not a processor
    resolved = resolve_hooks([{"name": "min_length", "params": {"min_words": 3}}], TOY_VOCAB)
    assert resolved.processors == [] and resolved.min_words == 3


# the toy model's words 4, 5, 6 as a vocabulary, for hooks given as JSON
TOY_VOCAB = Vocabulary((*SPECIALS, "x", "y", "z"))


def test_resolved_processors_on_a_wide_beam_equal_exhaustive_search_over_allowed_captions() -> None:
    resolved = resolve_hooks(
        [
            {"name": "ban_words", "params": {"words": ["x"]}},
            {"name": "no_repeat_ngram", "params": {"n": 2}},
            {"name": "min_length", "params": {"min_words": 2}},
        ],
        TOY_VOCAB,
    )
    assert [type(p) for p in resolved.processors] == [BanWords, NoRepeatNgram]
    assert resolved.min_words == 2

    def allowed(words: list[int]) -> bool:
        return 4 not in words and len(words) >= 2 and len(set(bigrams(words))) == len(bigrams(words))

    for image in (0, 6, 9):
        truth = exhaustive(image, 4, 0.8)
        kept = [t for t in truth if allowed(t[0])]
        assert kept[0][0] != truth[0][0]  # the constraints change the best caption
        (hyps,) = run_with(
            [image],
            len(truth),
            4,
            10,
            0.8,
            logits_hook=compose(resolved.processors),
            min_length=resolved.min_words,
        )
        assert [h.tokens for h in hyps] == [t[0] for t in kept[:10]]
        np.testing.assert_allclose([h.logprob for h in hyps], [t[1] for t in kept[:10]], rtol=1e-6)
        np.testing.assert_allclose([h.score for h in hyps], [t[2] for t in kept[:10]], rtol=1e-6)


# "a big dog" model: a deterministic chain a -> big -> dog -> EOS, with "puppy" a less likely alternative
SYN_VOCAB = Vocabulary((*SPECIALS, "a", "big", "dog", "puppy"))
S_A, S_BIG, S_DOG, S_PUPPY = 4, 5, 6, 7


def chain_step(tokens, lengths, state, image_index):
    nxt = {BOS: {S_A: 3.0}, S_A: {S_BIG: 3.0}, S_BIG: {S_DOG: 3.0, S_PUPPY: 1.0}}
    logits = np.zeros((tokens.shape[0], len(SYN_VOCAB)))
    for n in range(tokens.shape[0]):
        last = int(tokens[n, lengths[n] - 1])
        for word, value in nxt.get(last, {EOS: 4.0}).items():
            logits[n, word] = value
    logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return logprobs.astype(np.float32), state


def chain_search(**kwargs):
    (hyps,) = beam_search(chain_step, 1, 2, 5, BOS, EOS, 1, 1.0, None, BANNED, **kwargs)
    return hyps[0]


def test_synonym_substitution_turns_the_word_into_its_synonym() -> None:
    # O/S (Pantazopoulos et al., 2022, Table 6): S is the search with the SynonymSubstitution processor,
    # O the same search without it (the request's other hooks, here none)
    resolved = resolve_hooks(
        [{"name": "synonym_substitution", "params": {"pairs": [["dog", "puppy"]]}}], SYN_VOCAB
    )
    (sub,) = resolved.processors
    assert isinstance(sub, SynonymSubstitution)
    assert dict(zip(sub.src.tolist(), sub.dst.tolist(), strict=True)) == {S_DOG: S_PUPPY}
    calls: list[int] = []
    substituted = chain_search(logits_hook=compose(resolved.processors, calls))
    original = chain_search(logits_hook=compose(resolve_hooks([], SYN_VOCAB).processors))
    assert SYN_VOCAB.decode(original.tokens) == "a big dog"
    assert SYN_VOCAB.decode(substituted.tokens) == "a big puppy"
    assert sub.substitutions >= 1
    assert len(calls) >= 4  # the processor ran at every step of the S search (>= 3 words + EOS)
    # the synonym has probability 1: S's log-prob is O's without the log-prob of "dog"
    lp_dog = float(
        chain_step(np.array([[BOS, S_A, S_BIG]]), np.array([3]), np.zeros((1, 1)), None)[0][0, S_DOG]
    )
    assert substituted.logprob == pytest.approx(original.logprob - lp_dog, rel=1e-6)
    plain = chain_search()
    assert plain.tokens == original.tokens and plain.logprob == original.logprob


def test_hook_sees_constrained_rows_and_cannot_undo_constraints() -> None:
    seen: list[np.ndarray] = []

    def rogue(tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        seen.append(logprobs.copy())
        assert tokens.shape == (logprobs.shape[0], len(seen))  # BOS + one word per step, no padding
        return np.zeros_like(logprobs)  # tries to re-enable everything

    (hyps,) = run_with([3], 3, 4, 3, logits_hook=rogue)
    assert all(np.isneginf(lp[:, list(BANNED)]).all() for lp in seen)
    assert np.isneginf(seen[0][:, EOS]).all()  # min_length=1: no EOS before the first word
    assert all(set(h.tokens) <= set(WORDS) and 1 <= len(h.tokens) <= 4 for h in hyps)
    assert len(seen) >= 2 and all(h.score == 0.0 for h in hyps)  # the hook's zeros, masked again


def test_hook_must_keep_the_shape() -> None:
    with pytest.raises(ValueError, match="logits_hook"):
        run_with([0], 2, 3, 1, logits_hook=lambda tokens, lp: lp[:, :-1])


def test_hooks_of_one_search_do_not_touch_another_search_sharing_a_step_call() -> None:
    images_a, images_b = [5, 6], [7]
    step = make_step_fn(images_a + images_b)  # one model call for the rows of both searches
    seen_a: list[int] = []

    def hook_a(tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        seen_a.append(tokens.shape[0])
        return BanWords([4])(tokens, logprobs)

    def make(n: int, hook=None) -> BeamSearch:
        return BeamSearch(n, 3, 4, BOS, EOS, np.zeros((n, 2), np.float32), 0.8, BANNED, logits_hook=hook)

    a, b = make(2, hook_a), make(1)
    ra = a.rows()  # a starts one step earlier: the shared calls mix prefix lengths
    a.advance(ra, *make_step_fn(images_a)(ra.tokens, ra.lengths, ra.state, ra.image_index))
    while not (a.finished and b.finished):
        parts = [(s, s.rows(), off) for s, off in ((a, 0), (b, 2)) if not s.finished]
        width = max(r.tokens.shape[1] for _, r, _ in parts)
        tokens = np.concatenate(
            [np.pad(r.tokens, ((0, 0), (0, width - r.tokens.shape[1]))) for _, r, _ in parts]
        )
        lengths = np.concatenate([r.lengths for _, r, _ in parts])
        state = np.concatenate([r.state for _, r, _ in parts])
        index = np.concatenate([r.image_index + off for _, r, off in parts])
        logprobs, state_out = step(tokens, lengths, state, index)
        start = 0
        for search, rows, _ in parts:
            n = rows.rows.shape[0]
            search.advance(rows, logprobs[start : start + n], state_out[start : start + n])
            start += n
    alone_a = run_with(images_a, 3, 4, 3, 0.8, logits_hook=BanWords([4]))
    alone_b = run_with(images_b, 3, 4, 3, 0.8)
    assert [[h.tokens for h in r] for r in a.results(3)] == [[h.tokens for h in r] for r in alone_a]
    assert [[h.tokens for h in r] for r in b.results(3)] == [[h.tokens for h in r] for r in alone_b]
    assert any(4 in h.tokens for r in alone_b for h in r)  # b was free to use the word a bans
    assert seen_a and all(n <= 2 * 3 for n in seen_a)


# -------------------------------------------------------------------------------------------- diverse beam
def test_grouped_beam_step_penalises_earlier_groups_words() -> None:
    cum = np.array([[0.0, 0.0]])  # one beam per group, same prefix
    lp = np.log(np.array([[[0.1, 0.6, 0.3], [0.1, 0.6, 0.3]]]))
    plain = grouped_beam_step(cum, lp, eos=0, groups=2, diversity_penalty=0.0)
    assert plain.token.tolist() == [[1, 1]]
    sel = grouped_beam_step(cum, lp, eos=0, groups=2, diversity_penalty=1.0)
    assert sel.parent.tolist() == [[0, 1]] and sel.token.tolist() == [[1, 2]]  # log .6 - 1 < log .3
    np.testing.assert_allclose(sel.cum, np.log([[0.6, 0.3]]))  # stored log-probs are unpenalised
    np.testing.assert_allclose(sel.eos_cum, np.log([[0.1, 0.1]]))
    one = grouped_beam_step(cum, lp, eos=0, groups=1, diversity_penalty=5.0)
    ref = beam_step(cum, lp, eos=0)
    for field in ("parent", "token", "cum", "eos_cum"):
        np.testing.assert_array_equal(getattr(one, field), getattr(ref, field))


def test_one_group_equals_plain_search() -> None:
    plain = run_with(IMAGES[:6], 4, 4, 4, 0.7)
    grouped = run_with(IMAGES[:6], 4, 4, 4, 0.7, groups=1, diversity_penalty=2.0)
    assert [[(h.tokens, h.score) for h in r] for r in grouped] == [
        [(h.tokens, h.score) for h in r] for r in plain
    ]


def first_words_after(search: BeamSearch, step_fn, steps: int) -> np.ndarray:
    for _ in range(steps):
        rows = search.rows()
        search.advance(rows, *step_fn(rows.tokens, rows.lengths, rows.state, rows.image_index))
    return search.tokens[:, :, 1]


def test_diverse_groups_differ_where_plain_beams_share_a_prefix() -> None:
    step = make_step_fn(IMAGES)
    n = len(IMAGES)

    def make(**kwargs) -> BeamSearch:
        return BeamSearch(n, 3, 4, BOS, EOS, np.zeros((n, 2), np.float32), 1.0, BANNED, **kwargs)

    plain = first_words_after(make(), step, 2)
    shared = [img for img in range(n) if len(set(plain[img].tolist())) < 3]
    assert shared  # plain beam search: beams of these images share their first word after two steps
    diverse = make(groups=3, diversity_penalty=100.0)
    assert diverse.rows().rows.shape[0] == 3 * n  # one live beam per group on the first step
    first = first_words_after(diverse, step, 2)
    for img in range(n):
        assert len(set(first[img].tolist())) == 3, img  # every group keeps its own first word


def test_diverse_results_are_unique_true_scores_and_fill_the_pool() -> None:
    for penalty in (0.0, 0.5, 3.0):
        results = run_with(IMAGES[:5], 4, 4, 4, 1.0, groups=2, diversity_penalty=penalty)
        for img, hyps in zip(IMAGES[:5], results, strict=True):
            assert len(hyps) == 4  # one pool of K per image
            assert len({tuple(h.tokens) for h in hyps}) == 4  # groups reaching one caption: kept once
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            for h in hyps:
                assert h.logprob == pytest.approx(model_logprob(img, h.tokens), rel=1e-6)
                assert h.score == pytest.approx(h.logprob / len(h.tokens), rel=1e-9)


def test_diverse_search_has_more_distinct_first_words() -> None:
    plain = run_with(IMAGES, 3, 4, 3)
    diverse = run_with(IMAGES, 3, 4, 3, groups=3, diversity_penalty=2.0)
    distinct = [sum(len({h.tokens[0] for h in r}) for r in res) for res in (plain, diverse)]
    assert distinct[1] > distinct[0]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"groups": 0}, "groups"),
        ({"groups": 3}, "groups"),
        ({"diversity_penalty": -0.5}, "diversity_penalty"),
    ],
)
def test_diverse_arguments_validated(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        BeamSearch(1, 4, 3, BOS, EOS, np.zeros((1, 1), np.float32), **kwargs)


def test_transformers_finishing_keeps_end_tokens_ranked_in_the_k_best() -> None:
    # K = 2: live continuations -1.0, -2.0; end continuations -1.5 (2nd best overall) and -2.5 (4th)
    sel = np.array([[-1.0, -2.0, NEG_INF]])
    eos = np.array([[-1.5, -2.5, NEG_INF]])
    kept, kth = transformers_finishing(sel, eos, np.array([2]))
    assert kth.tolist() == [-1.5]
    assert kept[0, 0] == -1.5 and np.isneginf(kept[0, 1:]).all()
    # K = 1 (generate's greedy): the end token finishes only as the argmax
    kept, _ = transformers_finishing(np.array([[-0.5]]), np.array([[-0.7]]), np.array([1]))
    assert np.isneginf(kept).all()
    kept, _ = transformers_finishing(np.array([[-0.9]]), np.array([[-0.2]]), np.array([1]))
    assert kept.tolist() == [[-0.2]]


def test_transformers_done_follows_early_stopping_or_the_heuristic() -> None:
    full = np.array([True, True, False, True])
    best = np.array([-3.0, -1.0, -0.1, -1.0])  # best live beam's score at its current length
    worst = np.array([-2.0, -2.0, NEG_INF, -2.0])
    early = np.array([False, False, False, True])
    assert transformers_done(full, best, worst, early).tolist() == [True, False, False, True]
