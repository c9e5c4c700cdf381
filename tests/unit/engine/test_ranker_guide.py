"""The ``ranker_guided`` hook: its maths on hand-made arrays (candidates, potential-based shaping, the
shaped log-probs), its parameters' validation (errors name ``hooks.<i>.params.<x>``), and the guide's
bookkeeping across steps (``service.engine.guide``) with a ranker whose cosines are known."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.engine.guide import GuidedRows, GuideState, plan_rows, shape_rows
from service.engine.hooks import MAX_GUIDE_TEXTS, HookError, hook_catalog, resolve_hooks
from service.engine.processors import (
    MAX_GUIDE_POOL,
    RankerGuide,
    apply_guide,
    cosines,
    guide_bonus,
    guide_candidates,
)
from service.text.vocabulary import Vocabulary

NEG = -np.inf
EOS = 2


def vocab() -> Vocabulary:
    return Vocabulary(("<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "cat", "dog", "on"))


# -- maths --------------------------------------------------------------------------------------------


def test_candidates_are_each_rows_best_words_without_the_end_token() -> None:
    lp = np.array(
        [
            [NEG, NEG, -0.1, NEG, -1.0, -0.5, -2.0, -0.5, -3.0],  # EOS best: excluded; tie → lower id
            [NEG, NEG, -1.0, NEG, -0.2, NEG, NEG, NEG, NEG],  # one finite word only
        ]
    )
    words = guide_candidates(lp, 3, EOS)
    assert words.tolist() == [[5, 7, 4], [4, -1, -1]]
    assert guide_candidates(lp, 50, EOS).shape == (2, 8)  # at most V - 1 slots
    assert guide_candidates(lp[:0], 3, EOS).shape == (0, 3)


def test_bonus_makes_each_score_logprob_plus_weight_times_its_own_cosine() -> None:
    word_cos = np.array([[0.5, 0.2, np.nan], [0.1, 0.3, 0.4]])
    prefix_cos = np.array([0.35, np.nan])
    potential = np.array([0.3, 0.0])
    b = guide_bonus(word_cos, prefix_cos, potential, 2.0)
    # re-scored words: weight × (cosine − potential): cum − weight·potential + weight·cosine
    np.testing.assert_allclose(b.words[0, :2], [0.4, -0.2])
    np.testing.assert_allclose(b.words[1], [0.2, 0.6, 0.8])
    # every other word carries the row's lowest candidate cosine, so it never overtakes a candidate
    np.testing.assert_allclose(b.rest, [2.0 * (0.2 - 0.3), 2.0 * 0.1])
    np.testing.assert_allclose(b.rest_potential, [0.2, 0.1])
    np.testing.assert_allclose(b.word_potential[0], [0.5, 0.2, 0.2])
    # the end token: the caption so far, by its own cosine; unknown (NaN) → 0
    np.testing.assert_allclose(b.eos, [2.0 * 0.05, 0.0])


def test_bonus_without_candidates_scores_only_the_end() -> None:
    b = guide_bonus(np.zeros((2, 0)), np.array([0.4, np.nan]), np.array([0.1, 0.2]), 1.0)
    np.testing.assert_allclose(b.rest, [0.0, 0.0])
    np.testing.assert_allclose(b.rest_potential, [0.1, 0.2])  # the potential carries on
    np.testing.assert_allclose(b.eos, [0.3, 0.0])


def test_normalisation_makes_finished_scores_normalised_logprob_plus_weight_times_cosine() -> None:
    # a beam of 3 words re-scored at 2 words (potential = cosine 0.3 × 2) ends now: divided by 3 words,
    # its score is its normalised log-prob + weight × its whole caption's cosine
    b = guide_bonus(np.zeros((1, 0)), np.array([0.5]), np.array([0.3 * 2]), 4.0, now=3.0, after=4.0)
    cum = -2.4 + 4.0 * 0.3 * 2  # its log-prob and what the earlier re-scoring put in
    assert (cum + b.eos[0]) / 3.0 == pytest.approx(-2.4 / 3.0 + 4.0 * 0.5)
    c = guide_bonus(np.array([[0.2, 0.6]]), np.array([np.nan]), np.array([0.3 * 2]), 4.0, now=3.0, after=4.0)
    np.testing.assert_allclose(c.word_potential, [[0.8, 2.4]])  # cosine × the continuation's 4 words
    np.testing.assert_allclose(c.words, [[4.0 * (0.8 - 0.6), 4.0 * (2.4 - 0.6)]])
    with pytest.raises(ValueError, match=r"^now must be > 0, got 0\.0$"):
        guide_bonus(np.zeros((1, 0)), np.zeros(1), np.zeros(1), 1.0, now=0.0)


def test_weight_zero_adds_exactly_nothing() -> None:
    rng = np.random.default_rng(0)
    lp = np.log(rng.dirichlet(np.ones(9), size=4)).astype(np.float32)
    lp[1, 3] = NEG
    words = guide_candidates(lp, 3, EOS)
    b = guide_bonus(rng.random((4, 3)), rng.random(4), rng.random(4), 0.0)
    out = apply_guide(lp, words, b, EOS)
    assert out.dtype == np.float32 and np.array_equal(out, lp) and out is not lp


def test_apply_adds_the_bonus_per_column_and_keeps_minus_infinity() -> None:
    lp = np.array([[NEG, NEG, -1.0, NEG, -0.5, -0.7, -2.0, NEG, -3.0]], dtype=np.float32)
    words = np.array([[4, 5, -1]])
    b = guide_bonus(np.array([[0.5, 0.1, np.nan]]), np.array([0.3]), np.array([0.2]), 1.0)
    out = apply_guide(lp, words, b, EOS)
    expect = lp.astype(np.float64) + 1.0 * (0.1 - 0.2)  # every other word: the lowest candidate's
    expect[0, 4] = -0.5 + 0.3
    expect[0, 5] = -0.7 - 0.1
    expect[0, EOS] = -1.0 + 0.1
    np.testing.assert_allclose(out, expect, rtol=1e-6)
    assert np.isneginf(out[0, [0, 1, 3, 7]]).all()
    with pytest.raises(ValueError, match="word_cosine must be"):
        guide_bonus(np.zeros((2, 1)), np.zeros(3), np.zeros(3), 1.0)


def test_cosines_are_row_wise_dot_products() -> None:
    text = np.array([[1.0, 0.0], [0.6, 0.8]])
    image = np.array([[0.0, 1.0], [0.6, 0.8]])
    np.testing.assert_allclose(cosines(text, image), [0.0, 1.0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every": 0, "weight": 1.0, "pool": 3}, "every must be an integer >= 1, got 0"),
        ({"every": 1, "weight": -1.0, "pool": 3}, "weight must be in"),
        ({"every": 1, "weight": float("nan"), "pool": 3}, "weight must be a finite"),
        ({"every": 1, "weight": 1.0, "pool": MAX_GUIDE_POOL + 1}, "pool must be <="),
        ({"every": 1, "weight": 1.0, "pool": 3, "ranker": ""}, "ranker must be"),
    ],
)
def test_guide_rejects_bad_arguments_naming_them(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RankerGuide(**kwargs)


def test_guide_rescoring_steps() -> None:
    guide = RankerGuide(every=3, weight=1.0, pool=2)
    assert [t for t in range(8) if guide.scores_words(t)] == [0, 3, 6]


# -- the hook's validation -------------------------------------------------------------------------------


def test_hook_is_registered_with_its_parameters() -> None:
    entry = next(h for h in hook_catalog() if h["name"] == "ranker_guided")
    assert set(entry["params"]) == {"every", "weight", "pool", "ranker"}


def test_hook_resolves_with_defaults_and_given_values() -> None:
    out = resolve_hooks([{"name": "ranker_guided"}], vocab())
    assert out.guide is not None and (out.guide.every, out.guide.weight, out.guide.pool) == (2, 2.0, 5)
    assert out.guide.ranker is None
    out = resolve_hooks(
        [
            {"name": "no_repeat_ngram", "params": {"n": 2}},
            {"name": "ranker_guided", "params": {"every": 2, "weight": 0.5, "pool": 4, "ranker": "vsepp"}},
        ],
        vocab(),
    )
    assert out.guide is not None and (out.guide.every, out.guide.weight, out.guide.pool) == (2, 0.5, 4)
    assert out.guide.ranker == "vsepp" and out.guide_index == 1 and out.processors


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"every": 0}, "every"),
        ({"every": 1.5}, "every"),
        ({"weight": -0.1}, "weight"),
        ({"weight": 101}, "weight"),
        ({"weight": "big"}, "weight"),
        ({"pool": 0}, "pool"),
        ({"pool": MAX_GUIDE_POOL + 1}, "pool"),
        ({"ranker": 3}, "ranker"),
        ({"lambda": 1}, "lambda"),
    ],
)
def test_bad_params_name_the_param(params: dict[str, Any], field: str) -> None:
    hooks = [{"name": "ban_words", "params": {"words": ["dog"]}}, {"name": "ranker_guided", "params": params}]
    with pytest.raises(HookError) as caught:
        resolve_hooks(hooks, vocab())
    assert caught.value.loc == ("hooks", 1, "params", field)


def test_cost_bound_and_exclusions_are_checked_against_the_request() -> None:
    out = resolve_hooks([{"name": "ranker_guided", "params": {"pool": 50}}], vocab())
    out.check(MAX_GUIDE_TEXTS // 51, 16)
    with pytest.raises(HookError, match="partial captions") as caught:
        out.check(MAX_GUIDE_TEXTS // 51 + 1, 16)
    assert caught.value.loc == ("hooks", 0, "params", "pool")
    forced = resolve_hooks(
        [{"name": "ranker_guided"}, {"name": "force_words", "params": {"ids": [4, 6]}}], vocab()
    )
    with pytest.raises(HookError, match="force_words") as caught:
        forced.check(1, 2)
    assert caught.value.loc == ("hooks", 0, "name")
    with pytest.raises(HookError, match="only once"):
        resolve_hooks([{"name": "ranker_guided"}, {"name": "ranker_guided"}], vocab())


# -- the guide across steps (pure: plan_rows → cosines of its captions → shape_rows) ------------------


def cos(caption: tuple[int, ...]) -> float:
    """A ranker's cosine for the tests: 0.1 per 'red' (5) + 0.01 per word."""
    return 0.1 * caption.count(5) + 0.01 * len(caption)


def step(
    guide: RankerGuide, state: GuideState, tokens: np.ndarray, lp: np.ndarray
) -> tuple[np.ndarray, list]:
    """One step of one single-image request: the captions it asked for, and its shaped log-probs."""
    n = tokens.shape[0]
    rows = GuidedRows(
        state,
        guide,
        np.zeros((1, 2, 2), np.float32),
        np.zeros((1, 2, 2, 3), np.uint8),
        0,
        n,
        np.zeros(n, np.int64),
    )
    plan = plan_rows(rows, tokens, np.full(n, tokens.shape[1], dtype=np.int64), lp, EOS)
    asked = [list(k[1:]) for k in plan.captions]
    assert all(k[0] == 0 for k in plan.captions)  # keyed by the image within the request
    return shape_rows(plan, lp, EOS, np.array([cos(k[1:]) for k in plan.captions])), asked


def test_scores_telescope_to_logprob_plus_weight_times_cosine() -> None:
    guide = RankerGuide(every=1, weight=2.0, pool=2, ranker="r")
    state = GuideState()
    lp0 = np.full((1, 9), NEG)
    lp0[0, [4, 5, 6]] = [-0.1, -0.5, -3.0]
    out0, asked = step(guide, state, np.array([[1]]), lp0)
    # step 0: 'a' and 'red' re-scored from potential 0; the end token's empty caption is not embedded
    assert asked == [[4], [5]]
    np.testing.assert_allclose(out0[0, [4, 5]], [-0.1 + 2 * cos((4,)), -0.5 + 2 * cos((5,))], rtol=1e-6)
    np.testing.assert_allclose(out0[0, 6], -3.0 + 2 * cos((4,)), rtol=1e-6)  # the lowest candidate's
    assert state.last == 0 and state.potential((0, 5)) == pytest.approx(cos((5,)))
    # step 1: two beams ('red', 'a'): each one's potential is taken out, its new cosine put in
    lp1 = np.full((2, 9), NEG)
    lp1[:, [EOS, 6, 7]] = [[-1.0, -0.2, -0.4], [-0.8, -0.3, -0.6]]
    out1, asked = step(guide, state, np.array([[1, 5], [1, 4]]), lp1)
    assert asked == [[5, 6], [5, 7], [4, 6], [4, 7]]  # the ends' cosines are known: not asked again
    total = (-0.5 + 2 * cos((5,))) + out1[0, 6]  # the beam 'red cat' after step 1, of 2 words:
    assert total / 2 == pytest.approx((-0.5 - 0.2) / 2 + 2 * cos((5, 6)), rel=1e-6)  # normalised + λ·cos
    np.testing.assert_allclose(out1[:, EOS], lp1[:, EOS], rtol=1e-6)  # a finished caption: its own cosine
    assert state.texts == 6 and state.calls == 2


def test_every_k_keeps_the_last_potential_and_scores_ends_each_step() -> None:
    guide = RankerGuide(every=2, weight=1.0, pool=1, ranker="r")
    state = GuideState()
    lp0 = np.full((1, 9), NEG)
    lp0[0, [5, 6]] = [-0.1, -0.2]
    step(guide, state, np.array([[1]]), lp0)
    lp1 = np.full((1, 9), NEG)
    lp1[0, [EOS, 6]] = [-0.5, -0.1]
    out1, asked = step(guide, state, np.array([[1, 5]]), lp1)
    assert asked == []  # no word re-scored; the end's caption 'red' was re-scored at step 0
    np.testing.assert_array_equal(out1, lp1)
    lp2 = np.full((1, 9), NEG)
    lp2[0, [EOS, 7]] = [-0.5, -0.1]
    out2, asked = step(guide, state, np.array([[1, 5, 6]]), lp2)
    assert asked == [[5, 6, 7], [5, 6]]  # a word re-scored, and the caption so far for its end
    # potential: cosine × words at the last re-scoring ('red': 1 word); ends: 2 words, words: 3
    np.testing.assert_allclose(out2[0, EOS], -0.5 + 2 * cos((5, 6)) - cos((5,)), rtol=1e-5)
    np.testing.assert_allclose(out2[0, 7], -0.1 + 3 * cos((5, 6, 7)) - cos((5,)), rtol=1e-5)


def test_a_step_made_again_is_shaped_the_same() -> None:
    guide = RankerGuide(every=1, weight=1.0, pool=2, ranker="r")
    state = GuideState()
    lp0 = np.full((1, 9), NEG)
    lp0[0, [4, 5]] = [-0.1, -0.5]
    step(guide, state, np.array([[1]]), lp0)
    lp1 = np.full((2, 9), NEG)
    lp1[:, [EOS, 6, 7]] = -1.0
    tokens = np.array([[1, 5], [1, 4]])
    first, _ = step(guide, state, tokens, lp1)
    again, _ = step(guide, state, tokens, lp1)  # the batch changed under the step: made again
    np.testing.assert_array_equal(first, again)
    with pytest.raises(ValueError, match="cosine must have"):
        rows = GuidedRows(
            state,
            guide,
            np.zeros((1, 2, 2), np.float32),
            np.zeros((1, 2, 2, 3), np.uint8),
            0,
            2,
            np.zeros(2, np.int64),
        )
        plan_rows(rows, tokens, np.full(2, 2), lp1, EOS).cosines(np.zeros(1))
