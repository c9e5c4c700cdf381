"""``rerank_order``: the re-ranked order of one image's candidates (ranker cosine + weight · fluency);
``order_captions``: one image's final ``n_best`` captions, in beam order or re-ranked."""

import pytest

from service.engine.beam import Hypothesis
from service.engine.params import SearchParams
from service.engine.rerank import Caption, order_captions, rerank_order


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


HYPS = [Hypothesis([4], -0.2, -0.2), Hypothesis([5, 6], -1.0, -0.5), Hypothesis([6], -0.9, -0.9)]


def decode(ids: list[int]) -> str:
    return " ".join(f"w{i}" for i in ids)


def test_order_captions_without_scores_is_the_beam_order_cut_to_n_best() -> None:
    params = SearchParams(model="toy", beam_size=3, n_best=2)
    assert order_captions(HYPS, None, params, decode) == [
        Caption("w4", [4], -0.2, -0.2, None, 1),
        Caption("w5 w6", [5, 6], -1.0, -0.5, None, 2),
    ]


def test_order_captions_re_ranks_with_the_requests_weight() -> None:
    scores = [0.1, 0.3, 0.31]
    alone = SearchParams(model="toy", beam_size=3, n_best=3, ranker="r")
    assert [(c.beam_rank, c.ranker_score) for c in order_captions(HYPS, scores, alone, decode)] == [
        (3, 0.31),
        (2, 0.3),
        (1, 0.1),
    ]
    weighted = SearchParams(model="toy", beam_size=3, n_best=1, ranker="r", rerank_weight=1.0)
    (best,) = order_captions(HYPS, scores, weighted, decode)  # -0.1 > -0.2 > -0.59
    assert (best.text, best.beam_rank) == ("w4", 1)
