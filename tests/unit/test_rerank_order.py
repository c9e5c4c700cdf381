"""``rerank_order``: the re-ranked order of one image's candidates (ranker cosine + weight · fluency)."""

import pytest

from service.engine.rerank import rerank_order


def test_weight_zero_is_the_rankers_order_and_stable() -> None:
    assert rerank_order([0.1, 0.5, 0.3, 0.5], [-0.1, -0.9, -0.2, -0.3]) == [1, 3, 2, 0]


def test_weight_breaks_near_ties_towards_the_fluent_caption() -> None:
    scores, fluency = [0.50, 0.51, 0.20], [-0.2, -1.5, -0.1]
    assert rerank_order(scores, fluency, 0.0) == [1, 0, 2]
    assert rerank_order(scores, fluency, 0.05) == [0, 1, 2]  # 0.49 > 0.435 > 0.195
    assert rerank_order(scores, fluency, 10.0) == [2, 0, 1]  # the captioner's order wins


@pytest.mark.parametrize("weight", [-0.1, 10.5])
def test_weight_out_of_range_is_named(weight: float) -> None:
    with pytest.raises(ValueError, match="weight"):
        rerank_order([0.1], [-0.1], weight)


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="normalized_logprobs"):
        rerank_order([0.1, 0.2], [-0.1])
