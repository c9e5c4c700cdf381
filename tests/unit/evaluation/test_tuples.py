"""Scene-graph tuple F1 (SPICE analogue): graph tuples, caption parsing (objects, attributes, relations,
background), F1 edge cases, the world generator's own references scored against their graphs, and the
real spaCy attachment checker as the attribute source."""

from __future__ import annotations

from typing import Any

import pytest

from sceneworld.dataset import generate_graphs
from service.evaluation.tuples import (
    CATEGORIES,
    caption_tuple_f1,
    caption_tuples,
    corpus_tuple_f1,
    graph_tuples,
    relation_tuple,
    tuple_category,
    tuple_f1,
)
from service.text.attachment import AttachmentChecker
from service.text.concepts import ConceptPair


def obj(
    noun: str, colour: str, size: str, action: str | None = None, prop: str | None = None
) -> dict[str, Any]:
    return {"noun": noun, "colour": colour, "size": size, "action": action, "prop": prop, "layer": "ground"}


def rel(subject: int, predicate: str, target: int | str) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": target}


# a small black cat sitting left of a big brown dog; a man in a red shirt holding a kite next to the dog
GRAPH: dict[str, Any] = {
    "background": "grass",
    "objects": [
        obj("cat", "black", "small", "sit"),
        obj("dog", "brown", "big", "stand"),
        obj("man", "red", "big", "hold", "kite"),
    ],
    "relations": [
        rel(0, "left of", 1),
        rel(1, "right of", 0),
        rel(0, "left of", 2),
        rel(2, "right of", 0),
        rel(1, "next to", 2),
        rel(2, "next to", 1),
        rel(2, "holding", "kite"),
    ],
}


@pytest.fixture(scope="module")
def references() -> list[dict[str, Any]]:
    return generate_graphs(50, 0)  # seed 0: its 50 scenes include a rider and every predicate


# ------------------------------------------------------------------------------------------ graph side
def test_graph_tuples() -> None:
    got = graph_tuples(GRAPH)
    assert got == {
        ("background", "grass"),
        ("cat",),
        ("dog",),
        ("man",),
        ("kite",),
        ("cat", "black"),
        ("cat", "small"),
        ("cat", "sit"),
        ("dog", "brown"),
        ("dog", "big"),
        ("dog", "stand"),
        ("man", "red"),
        ("man", "big"),
        ("man", "hold"),
        ("cat", "left of", "dog"),  # right of folded into left of
        ("cat", "left of", "man"),
        ("dog", "next to", "man"),  # symmetric: nouns sorted, one tuple
        ("man", "holding", "kite"),
    }


def test_relation_canonical_forms() -> None:
    assert relation_tuple("dog", "right of", "cat") == ("cat", "left of", "dog")
    assert relation_tuple("dog", "below", "bird") == ("bird", "above", "dog")
    assert relation_tuple("man", "next to", "cat") == relation_tuple("cat", "next to", "man")
    assert relation_tuple("man", "on", "horse") == ("man", "on", "horse")


def test_graph_eating_and_rider() -> None:
    graph = {
        "background": "street",
        "objects": [
            obj("horse", "white", "big"),
            obj("woman", "blue", "small", "ride"),
            obj("dog", "red", "small", "eat", "food"),
        ],
        "relations": [rel(1, "on", 0), rel(2, "below", 1)],
    }
    got = graph_tuples(graph)
    assert {("woman", "on", "horse"), ("woman", "ride"), ("dog", "eating", "food"), ("food",)} <= got
    assert ("woman", "above", "dog") in got


def test_tuple_category() -> None:
    assert [
        tuple_category(t) for t in (("dog",), ("dog", "red"), ("dog", "on", "horse"), ("background", "sand"))
    ] == [
        "object",
        "attribute",
        "relation",
        "background",
    ]
    with pytest.raises(ValueError):
        tuple_category(())


# ------------------------------------------------------------------------------------------ caption side
def test_true_caption_is_all_true() -> None:
    caption = "a small black cat sitting to the left of a big brown dog on the grass"
    got = caption_tuples(caption)
    assert got == {
        ("cat",),
        ("dog",),
        ("cat", "small"),
        ("cat", "black"),
        ("cat", "sit"),
        ("dog", "big"),
        ("dog", "brown"),
        ("cat", "left of", "dog"),
        ("background", "grass"),
    }
    assert caption_tuple_f1(caption, GRAPH)["precision"] == 1.0


def test_wrong_colour_loses_the_attribute() -> None:
    right = caption_tuple_f1("a black cat sitting in a field", GRAPH)
    wrong = caption_tuple_f1("a white cat sitting in a field", GRAPH)
    assert ("cat", "white") in caption_tuples("a white cat sitting in a field")
    assert right["matches"] - wrong["matches"] == 1
    assert wrong["precision"] == pytest.approx(3 / 4) and right["precision"] == 1.0
    assert wrong["f1"] < right["f1"]


def test_wrong_noun_loses_object_and_attributes() -> None:
    right = caption_tuples("a small black cat sitting")
    wrong = caption_tuples("a small black horse sitting")
    truth = graph_tuples(GRAPH)
    assert right <= truth
    assert wrong & truth == frozenset()
    assert wrong == {("horse",), ("horse", "small"), ("horse", "black"), ("horse", "sit")}
    assert caption_tuple_f1("a small black horse sitting", GRAPH)["f1"] == 0.0


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        ("a huge automobile parked beside a large green dog", ("car", "next to", "dog")),
        ("a dog next to a cat", ("cat", "next to", "dog")),
        ("a gray plane near a big child that is holding a kite", ("child", "next to", "plane")),
        ("a cat to the left of a bus", ("cat", "left of", "bus")),
        ("a cat to the right of a bus", ("bus", "left of", "cat")),
        ("a red bird flying above two dogs", ("bird", "above", "dog")),
        ("a bird over a small cat", ("bird", "above", "cat")),
        ("a bird below a plane", ("plane", "above", "bird")),
        ("a man on a horse on the beach", ("man", "on", "horse")),
        ("a lady on top of a white pony", ("woman", "on", "horse")),
        ("a kid on the back of a horse", ("child", "on", "horse")),
        ("a woman riding a horse", ("woman", "on", "horse")),
        ("a guy that is riding a brown horse in a field", ("man", "on", "horse")),
        ("a boy holding a kite", ("child", "holding", "kite")),
        ("a man in a blue shirt is carrying an umbrella on the street", ("man", "holding", "umbrella")),
        ("a woman with a frisbee", ("woman", "holding", "frisbee")),
        ("a woman with a sandwich", ("woman", "eating", "sandwich")),
        ("a man eating a pizza next to a car", ("man", "eating", "pizza")),
        ("a man eating a pizza next to a car", ("car", "next to", "man")),
        ("a pony eating some grass", ("horse", "eating", "grass")),
        ("a puppy eating food from a bowl in a room", ("dog", "eating", "food")),
        ("a cat beside a dog that is standing", ("cat", "next to", "dog")),
    ],
)
def test_relation_phrases(caption: str, expected: tuple[str, str, str]) -> None:
    assert expected in caption_tuples(caption)


def test_places_are_not_relations() -> None:
    got = caption_tuples("a plane flying over the grass")
    assert ("background", "grass") in got
    assert [t for t in got if len(t) == 3] == []
    assert ("grass",) not in got
    eats = caption_tuples("a horse eating grass on a lawn")
    assert {("grass",), ("horse", "eating", "grass"), ("background", "grass")} <= eats
    assert caption_tuples("a man with a dog") == {("man",), ("dog",)}  # "with" + object: no predicate


def test_synonyms_and_plurals_map_to_canonical() -> None:
    got = caption_tuples("two large grey puppies laying down next to three kitties in a room")
    assert got == {
        ("dog",),
        ("cat",),
        ("dog", "big"),
        ("dog", "gray"),
        ("dog", "lie"),
        ("cat", "next to", "dog"),
        ("background", "floor"),
    }
    assert caption_tuples("ladies carrying umbrellas on a road") == {
        ("woman",),
        ("umbrella",),
        ("woman", "hold"),
        ("woman", "holding", "umbrella"),
        ("background", "street"),
    }
    assert {("plane",), ("plane", "fly"), ("background", "water")} <= caption_tuples(
        "a jet flies over the lake"
    )


def test_person_clothes_colour() -> None:
    got = caption_tuples("a man in a red shirt holding a kite")
    assert {("man", "red"), ("man", "hold"), ("man", "holding", "kite")} <= got
    assert ("dog", "red") not in caption_tuples("a dog in a red shirt")  # clothes colour is a person's
    assert ("woman", "blue") in caption_tuples("a woman is wearing a blue jacket", pairs=[])


def test_pairs_replace_the_fallback_attributes() -> None:
    pairs = [ConceptPair("adjective", "white", "car"), ConceptPair("verb", "stand", "dog")]
    got = caption_tuples("the car is white and a dog stands", pairs=pairs)
    assert {("car", "white"), ("dog", "stand")} <= got
    assert ("car", "white") not in caption_tuples("the car is white")  # fallback: only pre-nominal
    assert ("dog", "stand") in caption_tuples("the car is white and a dog stands")
    assert caption_tuples("a big car", pairs=[]) == {("car",)}  # pairs given: no word-order guessing


# ------------------------------------------------------------------------------------------ scores
def test_f1_edge_cases() -> None:
    assert tuple_f1(frozenset(), frozenset()) == {
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "matches": 0.0,
        "candidates": 0.0,
        "references": 0.0,
    }
    one = frozenset({("dog",)})
    for cand, ref in ((frozenset(), one), (one, frozenset())):
        score = tuple_f1(cand, ref)
        assert (score["precision"], score["recall"], score["f1"]) == (0.0, 0.0, 0.0)
    assert tuple_f1(one, frozenset({("cat",)}))["f1"] == 0.0
    score = tuple_f1({("dog",), ("dog", "red")}, {("dog",), ("cat",), ("cat", "red"), ("dog", "big")})
    assert (score["precision"], score["recall"]) == (0.5, 0.25)
    assert score["f1"] == pytest.approx(2 * 0.5 * 0.25 / 0.75)


def test_corpus_scores() -> None:
    captions = ["a black cat", "a white horse"]
    out = corpus_tuple_f1(captions, [GRAPH, GRAPH])
    first = caption_tuple_f1(captions[0], GRAPH)
    assert out["f1"] == pytest.approx(first["f1"] / 2)
    assert out["micro_precision"] == pytest.approx(2 / 4)
    assert out["images"] == 2.0
    for category in CATEGORIES:
        assert {f"{category}_precision", f"{category}_recall", f"{category}_f1"} <= set(out)
    assert out["object_precision"] == 0.5 and out["attribute_precision"] == 0.5
    assert out["relation_recall"] == 0.0 and out["background_recall"] == 0.0
    with pytest.raises(ValueError):
        corpus_tuple_f1(captions, [GRAPH])
    with pytest.raises(ValueError):
        corpus_tuple_f1(captions, [GRAPH, GRAPH], pairs=[[]])
    with pytest.raises(ValueError):
        corpus_tuple_f1([], [])


# ------------------------------------------------------------------------------------------ references
def test_references_state_only_true_tuples(references: list[dict[str, Any]]) -> None:
    captions = [c["text"] for g in references for c in g["captions"]]
    graphs = [g for g in references for _ in g["captions"]]
    out = corpus_tuple_f1(captions, graphs)
    assert out["precision"] >= 0.9, out
    assert out["micro_precision"] >= 0.9, out
    assert 0.2 < out["recall"] < 0.9, out  # one caption says a part of the scene
    for category in ("object", "attribute", "relation", "background"):
        assert out[f"{category}_recall"] > 0.0, category


def test_references_recorded_pairs_are_found(references: list[dict[str, Any]]) -> None:
    """Every (modifier, noun) pair the generator records for a caption is an attribute tuple of it."""
    for graph in references:
        for caption in graph["captions"]:
            got = caption_tuples(caption["text"])
            for _kind, modifier, noun in caption["pairs"]:
                assert (noun, modifier) in got, caption["text"]


def test_references_use_every_predicate(references: list[dict[str, Any]]) -> None:
    found = {
        t[1] for g in references for c in g["captions"] for t in caption_tuples(c["text"]) if len(t) == 3
    }
    assert found == {"next to", "left of", "above", "on", "holding", "eating"}


# ------------------------------------------------------------------------------------------ spaCy pairs
@pytest.fixture(scope="module")
def checker() -> AttachmentChecker:
    return AttachmentChecker()


def test_attachment_checker_pairs(checker: AttachmentChecker, references: list[dict[str, Any]]) -> None:
    captions = ["the car that is parked on the street is white", "a small black cat sitting next to a dog"]
    pairs = checker.pairs_batch(captions)
    copula = caption_tuples(captions[0], pairs=pairs[0])
    assert ("car", "white") in copula and ("car", "white") not in caption_tuples(captions[0])
    assert {("cat", "small"), ("cat", "black"), ("cat", "sit")} <= caption_tuples(captions[1], pairs=pairs[1])
    texts = [c["text"] for g in references[:20] for c in g["captions"]]
    graphs = [g for g in references[:20] for _ in g["captions"]]
    out = corpus_tuple_f1(texts, graphs, pairs=checker.pairs_batch(texts))
    assert out["precision"] >= 0.9 and out["attribute_recall"] > 0.0, out
