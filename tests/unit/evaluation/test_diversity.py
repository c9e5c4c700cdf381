"""Diversity metrics of Nikolaus et al., 2019, Table 4 (van Miltenburg et al. 2018) on a hand-computed
example."""

from __future__ import annotations

import pytest

from service.evaluation.diversity import diversity, mean_segmental_ttr, training_index

CAPTIONS = ["A black cat.", "a black dog", "a cat"]
# tokens: a black cat | a black dog | a cat  -> 8 tokens, 4 types
# bigrams over the stream: (a black) (black cat) (cat a) (a black) (black dog) (dog a) (a cat): 7, 6 types


def test_hand_example_plain_ttr_fallback() -> None:
    rep = diversity(CAPTIONS, ["a black cat", "a dog"])
    assert rep.captions == 3
    assert rep.asl == pytest.approx(8 / 3)
    assert rep.asl_std == pytest.approx((2 * (1 / 3) ** 2 + (2 / 3) ** 2) ** 0.5 / 3**0.5)
    assert rep.types == 4
    assert rep.ttr1 == pytest.approx(4 / 8)  # fewer than 1000 tokens: plain TTR
    assert rep.ttr2 == pytest.approx(6 / 7)
    assert rep.novel == pytest.approx(2 / 3)  # "a black cat" is a training caption


def test_hand_example_segments() -> None:
    rep = diversity(CAPTIONS, segment=4)
    # unigram segments [a black cat a] -> 3/4, [black dog a cat] -> 4/4
    assert rep.ttr1 == pytest.approx((3 / 4 + 1.0) / 2)
    # bigram segments [(a black) (black cat) (cat a) (a black)] -> 3/4; the last 3 bigrams are dropped
    assert rep.ttr2 == pytest.approx(3 / 4)
    assert rep.novel is None


def test_novel_index_and_edges() -> None:
    index = training_index(["A black cat!", "a dog"])
    assert diversity(["a black cat", "a dog", "a bird"], index).novel == pytest.approx(1 / 3)
    assert mean_segmental_ttr([], 10) == 0.0
    assert mean_segmental_ttr(list("aaaa") + list("abcd"), 4) == pytest.approx((1 / 4 + 1) / 2)
    with pytest.raises(ValueError):
        diversity([])
    with pytest.raises(ValueError):
        mean_segmental_ttr(["a"], 0)
