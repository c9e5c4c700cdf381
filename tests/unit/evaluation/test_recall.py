"""Recall@K (Nikolaus et al., 2019, Eq. 1) on a hand-computed example.

These tests use a FAKE pairs function instead of the spaCy attachment checker: an adjective pair is
found when the caption contains the words "<adjective> <noun>" in a row ("black cat"), a verb pair when it
contains "<noun> <verb>ing" ("man eating"). That is enough to exercise the counting; attachment itself
is tested with the real checker elsewhere."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from service.evaluation.recall import CATEGORIES, CachedPairs, pair_category, recall_at_k
from service.text.concepts import ConceptPair, load_concepts

BLACK_CAT = ConceptPair("adjective", "black", "cat")
RED_BUS = ConceptPair("adjective", "red", "bus")
BIG_BIRD = ConceptPair("adjective", "big", "bird")
SMALL_PLANE = ConceptPair("adjective", "small", "plane")
EAT_MAN = ConceptPair("verb", "eat", "man")
FLY_BIRD = ConceptPair("verb", "fly", "bird")
PAIRS = [BLACK_CAT, RED_BUS, BIG_BIRD, SMALL_PLANE, EAT_MAN, FLY_BIRD]


class FakePairs:
    """Fake matcher (see module docstring); counts how often each caption is parsed."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, captions: Sequence[str]) -> list[frozenset[ConceptPair]]:
        self.seen.extend(captions)
        out = []
        for caption in captions:
            text = f" {caption} "
            found = set()
            for p in PAIRS:
                phrase = f"{p.modifier} {p.noun}" if p.kind == "adjective" else f"{p.noun} {p.modifier}ing"
                if f" {phrase} " in text:
                    found.add(p)
            out.append(frozenset(found))
        return out


def refs(mention: str, times: int, other: str = "a picture") -> list[str]:
    """Five references, ``times`` of which mention ``mention`` (distinct strings)."""
    return [f"{mention} number {k}" for k in range(times)] + [f"{other} number {k}" for k in range(5 - times)]


REFERENCES = {
    1: refs("a black cat", 3),
    2: refs("a black cat", 1),
    3: refs("a black cat", 5),
    4: refs("a red bus", 2),
    5: refs("the man eating", 1),
    6: refs("a bird flying", 4),
    7: refs("a small plane", 1),
    8: refs("a dog", 5),  # no held-out pair: not an evaluation image of any pair
}
GENERATED = {
    1: ["a cat", "a black cat", "a cat", "a dog", "a cat sitting"],  # first hit at rank 2
    2: ["a dog", "a cat", "a cat sitting", "a white cat", "a black cat"],  # rank 5
    3: ["a cat", "a cat", "a white cat", "a cat on a table", "a brown cat"],  # never
    4: ["a red bus", "a bus", "a bus", "a bus", "a bus"],  # rank 1
    5: ["a black cat", "a man", "the man eating", "a man", "a man"],  # rank 3 (black cat not in refs)
    6: ["a bird flying", "a bird", "a bird", "a bird", "a bird"],  # rank 1
    7: ["a plane", "a white plane"],  # only two captions, never
    8: ["a black cat", "a dog", "a dog", "a dog", "a dog"],
}


def test_recall_at_k_hand_computed() -> None:
    report = recall_at_k(GENERATED, REFERENCES, PAIRS, FakePairs())
    bc = report.per_pair["black cat"]
    assert bc.images == 3
    assert bc.hits == {1: 0, 2: 1, 3: 1, 4: 1, 5: 2}
    assert bc.recall[5] == pytest.approx(2 / 3)
    assert bc.bucket_images == {1: 3, 2: 2, 3: 2, 4: 1, 5: 1}
    assert bc.bucket_recall[2][5] == pytest.approx(0.5)
    assert bc.bucket_recall[4][5] == 0.0
    assert report.per_pair["red bus"].recall == {k: 1.0 for k in range(1, 6)}
    assert report.per_pair["red bus"].bucket_recall[3][5] is None
    assert report.per_pair["eat man"].recall == {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0}
    assert report.per_pair["small plane"].images == 1
    assert report.per_pair["small plane"].recall[5] == 0.0
    big = report.per_pair["big bird"]
    assert big.images == 0 and big.recall[5] is None

    # unweighted mean over the five pairs with images (big bird left out)
    assert report.mean[1] == pytest.approx(2 / 5)  # red bus, fly bird
    assert report.mean[3] == pytest.approx((1 / 3 + 3) / 5)
    assert report.mean[5] == pytest.approx((2 / 3 + 3) / 5)
    # "at least b references" buckets at K = 5
    assert report.by_bucket[1][5] == pytest.approx(report.mean[5])
    assert report.bucket_pairs[2] == 3  # black cat, red bus, fly bird
    assert report.by_bucket[2][5] == pytest.approx((0.5 + 1.0 + 1.0) / 3)
    assert report.by_bucket[4][5] == pytest.approx(0.5)  # black cat 0/1, fly bird 1/1
    assert report.by_bucket[5][5] == 0.0  # black cat only
    # Table 3 categories
    assert report.per_category["colour_animate"][5] == pytest.approx(2 / 3)
    assert report.per_category["colour_inanimate"][5] == 1.0
    assert report.per_category["size_animate"][5] is None
    assert report.per_category["size_inanimate"][5] == 0.0
    assert report.per_category["verb_transitive"][1] == 0.0
    assert report.per_category["verb_transitive"][5] == 1.0
    assert report.per_category["verb_intransitive"][5] == 1.0


def test_report_json_shape_and_ranges() -> None:
    out = recall_at_k(GENERATED, REFERENCES, PAIRS, FakePairs()).to_dict()
    assert set(out) == {"recall_at_k", "per_pair", "by_bucket", "per_category"}
    assert list(out["recall_at_k"]) == ["1", "2", "3", "4", "5"]
    assert all(0.0 <= v <= 1.0 for v in out["recall_at_k"].values())
    assert out["per_pair"]["black cat"]["by_bucket"]["2"] == {
        "images": 2,
        "recall": {"1": 0.0, "2": 0.5, "3": 0.5, "4": 0.5, "5": 0.5},
    }
    assert out["by_bucket"]["2"]["pairs"] == 3
    assert set(out["per_category"]) == set(CATEGORIES)
    assert out["per_category"]["colour_animate"]["pairs"] == ["black cat"]
    # monotone in K
    r = out["recall_at_k"]
    assert [r[k] for k in "12345"] == sorted(r[k] for k in "12345")


def test_each_distinct_caption_parsed_once() -> None:
    fake = FakePairs()
    recall_at_k(GENERATED, REFERENCES, PAIRS, fake)
    assert len(fake.seen) == len(set(fake.seen))
    cached = CachedPairs(FakePairs())
    recall_at_k(GENERATED, REFERENCES, PAIRS, cached)
    inner = cached.pairs_fn
    assert isinstance(inner, FakePairs)
    n = len(inner.seen)
    recall_at_k(GENERATED, REFERENCES, PAIRS, cached)  # second run: nothing new to parse
    assert len(inner.seen) == n


def test_only_top_k_and_missing_images() -> None:
    report = recall_at_k(GENERATED, REFERENCES, PAIRS, FakePairs(), ks=(1, 2))
    assert report.per_pair["black cat"].hits == {1: 0, 2: 1}
    with pytest.raises(ValueError, match="evaluation images"):
        recall_at_k({1: ["a cat"]}, REFERENCES, PAIRS, FakePairs())
    with pytest.raises(ValueError, match="ks"):
        recall_at_k(GENERATED, REFERENCES, PAIRS, FakePairs(), ks=(0,))


def test_categories_of_seed_groups() -> None:
    concepts = load_concepts()
    got = {p.label: pair_category(p, concepts) for p in concepts.group(1)}
    assert got == {
        "black cat": "colour_animate",
        "big bird": "size_animate",
        "red bus": "colour_inanimate",
        "small plane": "size_inanimate",
        "eat man": "verb_transitive",
        "lie woman": "verb_intransitive",
    }
