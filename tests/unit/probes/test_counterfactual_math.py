"""The counterfactual probe's maths (``service.probes.scoring.counterfactual``): each miss class on
hand-written captions parsed by the real attachment checker, and the result's figures, shares and
intervals on a small hand-made set of minimal pairs."""

from __future__ import annotations

from typing import Any

import pytest

from service.evaluation.intervals import bootstrap_interval, paired_test
from service.probes.scoring.counterfactual import (
    MISS_CLASSES,
    OUTCOMES,
    classify,
    counterfactual_result,
    nouns_mentioned,
)
from service.probesets import MinimalPair, PairMinimalPairs
from service.text.attachment import AttachmentChecker
from service.text.concepts import ConceptPair

BLACK_CAT = ConceptPair("adjective", "black", "cat")
WHITE_CAT = ConceptPair("adjective", "white", "cat")
EAT_MAN = ConceptPair("verb", "eat", "man")


def _obj(i: int, noun: str, colour: str, size: str = "big", action: str | None = "stand") -> dict[str, Any]:
    return {"id": i, "noun": noun, "colour": colour, "size": size, "action": action}


# a black cat next to a white dog and a man who stands; its seen twin has a white cat
HELD_SCENE = {"objects": [_obj(0, "cat", "black"), _obj(1, "dog", "white"), _obj(2, "man", "red")]}
SEEN_SCENE = {"objects": [_obj(0, "cat", "white"), _obj(1, "dog", "white"), _obj(2, "man", "red")]}


@pytest.fixture(scope="module")
def checker() -> AttachmentChecker:
    return AttachmentChecker()


@pytest.mark.parametrize(
    ("caption", "pair", "scene", "expected"),
    [
        ("a black cat sitting next to a dog", BLACK_CAT, HELD_SCENE, "hit"),
        ("a cat next to a black dog", BLACK_CAT, HELD_SCENE, "modifier_elsewhere"),
        ("a white cat next to a dog", BLACK_CAT, HELD_SCENE, "wrong_value"),
        ("a big cat standing on the floor", BLACK_CAT, HELD_SCENE, "modifier_omitted"),
        ("a white dog standing next to a man", BLACK_CAT, HELD_SCENE, "noun_missing"),
        ("a man eating a pizza", EAT_MAN, HELD_SCENE, "hit"),
        ("a man standing next to a cat", EAT_MAN, HELD_SCENE, "wrong_value"),
        ("a cat eating food next to a man", EAT_MAN, HELD_SCENE, "modifier_elsewhere"),
        ("a man on the grass", EAT_MAN, HELD_SCENE, "modifier_omitted"),
        ("a black dog next to a white cat", WHITE_CAT, SEEN_SCENE, "hit"),
        # white is true of the dog too: not a misattachment, the cat just lacks its colour
        ("a white dog next to a cat", WHITE_CAT, SEEN_SCENE, "modifier_omitted"),
    ],
)
def test_each_miss_class_on_hand_written_captions(
    checker: AttachmentChecker, caption: str, pair: ConceptPair, scene: dict[str, Any], expected: str
) -> None:
    assert classify(pair, caption, checker.pairs(caption), scene) == expected


def test_nouns_are_found_by_synonym_and_plural() -> None:
    assert nouns_mentioned("Two kittens and a gentleman near some lorries.") == {"cat", "man", "truck"}
    assert nouns_mentioned("a field of grass") == frozenset()


def _set() -> tuple[list[PairMinimalPairs], dict[int, list[str]], dict[int, dict[str, Any]]]:
    """Four minimal pairs of "black cat": held-out sides hit 1 of 4 at top-1, seen sides 3 of 4."""
    minimal = tuple(MinimalPair(2 * i + 1, 2 * i, 0, "white") for i in range(4))
    entry = PairMinimalPairs(BLACK_CAT, "colour", minimal)
    held_captions = [
        ["a black cat next to a dog"],
        ["a cat next to a black dog", "a black cat"],  # hit at 5, not at 1
        ["a white cat next to a dog"],
        ["a dog next to a man"],
    ]
    seen_captions = [["a white cat"], ["a white cat"], ["a white cat"], ["a cat on the floor"]]
    generated: dict[int, list[str]] = {}
    scenes: dict[int, dict[str, Any]] = {}
    for i in range(4):
        generated[2 * i + 1], generated[2 * i] = held_captions[i], seen_captions[i]
        scenes[2 * i + 1], scenes[2 * i] = HELD_SCENE, SEEN_SCENE
    return [entry], generated, scenes


def test_the_result_shares_every_top1_caption_out_with_intervals(checker: AttachmentChecker) -> None:
    entries, generated, scenes = _set()
    texts = sorted({c for v in generated.values() for c in v})
    attached = dict(zip(texts, checker.pairs_batch(texts), strict=True))
    minimal = {BLACK_CAT.label: list(entries[0].minimal_pairs)}
    result = counterfactual_result(entries, minimal, generated, attached, scenes, frozenset({BLACK_CAT}))
    held, seen = result["held_out"], result["seen"]
    assert result["minimal_pairs"] == 4 and held["pairs"] == seen["pairs"] == 1
    assert held["recall"] == {"1": 0.25, "5": 0.5} and seen["recall"] == {"1": 0.75, "5": 0.75}
    assert held["outcomes"] == {
        "hit": 0.25,
        "modifier_elsewhere": 0.25,
        "noun_missing": 0.25,
        "wrong_value": 0.25,
        "modifier_omitted": 0.0,
    }
    assert seen["outcomes"]["modifier_omitted"] == 0.25
    for part in (held, seen):
        assert sum(part["outcomes"][o] for o in OUTCOMES) == pytest.approx(1.0)
        for o in MISS_CLASSES:
            interval = part["outcome_intervals"][o]
            assert interval["low"] <= part["outcomes"][o] <= interval["high"]
    # the intervals are those of service.evaluation.intervals on the per-minimal-pair hits
    expected = bootstrap_interval([[1.0, 0.0, 0.0, 0.0]])
    assert expected is not None and held["recall_interval"]["1"] == expected.as_dict()
    test = paired_test([[1.0, 0.0, 0.0, 0.0]], [[1.0, 1.0, 1.0, 0.0]], permutations=10_000)
    assert test is not None and result["difference"]["recall"]["1"] == test.as_dict()
    assert result["difference"]["recall"]["1"]["difference"]["estimate"] == -0.5
    rows = {r["side"]: r for r in result["pairs"]}
    assert rows["held_out"]["held_out"] and rows["held_out"]["model_held_out"] is True
    assert rows["seen"]["value"] == {"white": 4} and rows["held_out"]["hits"] == {"1": 1, "5": 2}
    partial = counterfactual_result(entries, minimal, generated, attached, scenes, None, with_intervals=False)
    assert partial["held_out"]["recall_interval"]["1"] is None and partial["held_out_known"] is False
    assert partial["pairs"][0]["model_held_out"] is None
