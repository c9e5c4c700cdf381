"""Attachment checker: the seeds' dependency rules on spaCy parses, synonyms, SceneWorld caption styles,
and agreement with the pairs SceneWorld's scene graphs record per caption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.text.attachment import AttachmentChecker, checker_agreement, main, scene_graph_captions
from service.text.concepts import ConceptPair


def adj(modifier: str, noun: str) -> ConceptPair:
    return ConceptPair("adjective", modifier, noun)


def verb(modifier: str, noun: str) -> ConceptPair:
    return ConceptPair("verb", modifier, noun)


@pytest.fixture(scope="module")
def checker() -> AttachmentChecker:
    return AttachmentChecker()


@pytest.mark.parametrize(
    ("caption", "pair"),
    [
        ("a white car", adj("white", "car")),
        ("two white cars", adj("white", "car")),
        ("a white and blue car", adj("white", "car")),
        ("a white and blue car", adj("blue", "car")),
        ("a big white car", adj("big", "car")),
        ("the car is white", adj("white", "car")),
        ("the car that is driving down the street is white", adj("white", "car")),
        ("a car that is white and blue", adj("blue", "car")),
        ("a man sits on a chair", verb("sit", "man")),
        ("a man that is sitting on a chair", verb("sit", "man")),
        ("a man sitting on a chair", verb("sit", "man")),
        ("a man is sitting on a chair", verb("sit", "man")),
        ("a blue car is driving down the white street", adj("blue", "car")),
        ("A large kitten.", adj("big", "cat")),
        ("a woman laying on a bed", verb("lie", "woman")),
        ("a woman lying on a bed", verb("lie", "woman")),
        ("The small white dog is laying on the bed.", adj("small", "dog")),
        ("a guy carrying a kite", verb("hold", "man")),
        ("a lady riding a pony", verb("ride", "woman")),
        ("a man standing and eating a pizza", verb("eat", "man")),
        ("a man and a woman are sitting on a bench", verb("sit", "man")),
        ("a man and a woman are sitting on a bench", verb("sit", "woman")),
        ("a jet flying over the water", verb("fly", "plane")),
    ],
)
def test_attached_pairs(checker: AttachmentChecker, caption: str, pair: ConceptPair) -> None:
    assert checker.contains(caption, pair), sorted(map(str, checker.pairs(caption)))


@pytest.mark.parametrize(
    ("caption", "pair"),
    [
        ("a blue car is driving down the white street", adj("white", "car")),
        ("a man in a white shirt", adj("white", "man")),  # the colour is the shirt's
        ("a lady riding a pony", verb("ride", "horse")),  # the horse is ridden, not riding
        ("a black dog next to a white cat", adj("black", "cat")),
        ("a black dog next to a white cat", adj("white", "dog")),
        ("a truck near a boy that is sitting", verb("sit", "truck")),
        ("a white plane flying over a kid that is sitting", verb("sit", "plane")),
    ],
)
def test_unattached_pairs(checker: AttachmentChecker, caption: str, pair: ConceptPair) -> None:
    assert not checker.contains(caption, pair), sorted(map(str, checker.pairs(caption)))


def test_canonical_names_and_only_inventory_pairs(checker: AttachmentChecker) -> None:
    assert checker.pairs("a large grey kitten sitting on a red couch") == {
        adj("big", "cat"),
        adj("gray", "cat"),
        verb("sit", "cat"),
    }
    assert checker.pairs("a tiny airplane and a huge lorry") == {adj("small", "plane"), adj("big", "truck")}
    assert checker.pairs("a green bench in a park") == frozenset()  # bench is not an inventory noun


@pytest.mark.parametrize(
    ("caption", "expected"),
    [  # SceneWorld caption styles, including spaCy parses the checker repairs
        ("a picture of a small grey puppy in a room", {adj("small", "dog"), adj("gray", "dog")}),
        ("a huge pony standing on the grass", {adj("big", "horse"), verb("stand", "horse")}),
        ("a pony laying on the street", {verb("lie", "horse")}),
        ("a small pony eating grass", {adj("small", "horse"), verb("eat", "horse")}),
        ("a huge truck on the street next to a little yellow lorry", {
            adj("big", "truck"), adj("small", "truck"), adj("yellow", "truck")
        }),
        ("a boat beside a large brown horse that is lying", {
            adj("big", "horse"), adj("brown", "horse"), verb("lie", "horse")
        }),
        ("a boy to the right of a huge gentleman in a red shirt that is standing", {
            adj("big", "man"), verb("stand", "man")
        }),
        ("a huge guy in a black shirt eating a pizza", {adj("big", "man"), verb("eat", "man")}),
        ("there is a black cat lying down on the grass", {adj("black", "cat"), verb("lie", "cat")}),
        ("two small birds flying high in the sky", {adj("small", "bird"), verb("fly", "bird")}),
        ("a large lady and a little brown kitten on the grass", {
            adj("big", "woman"), adj("small", "cat"), adj("brown", "cat")
        }),
    ],
)  # fmt: skip
def test_sceneworld_styles(checker: AttachmentChecker, caption: str, expected: set[ConceptPair]) -> None:
    assert checker.pairs(caption) == expected


def test_batch_matches_single(checker: AttachmentChecker) -> None:
    captions = ["a white car", "a man sitting on a chair", "the bus is red", "", "a dog"]
    assert checker.pairs_batch(captions, batch_size=2) == [checker.pairs(c) for c in captions]


def test_agreement_arithmetic() -> None:
    gold = [{adj("white", "car")}, {verb("sit", "man"), adj("big", "man")}, set()]
    predicted = [
        frozenset({adj("white", "car")}),
        frozenset({verb("sit", "man")}),
        frozenset({adj("red", "bus")}),
    ]
    report = checker_agreement(["a", "b", "c"], gold, predicted=predicted, examples=5)
    assert (report["true_positives"], report["false_positives"], report["false_negatives"]) == (2, 1, 1)
    assert report["precision"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["recall"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["false_negative_examples"] == [{"caption": "b", "pair": "big man"}]
    with pytest.raises(ValueError, match="differ"):
        checker_agreement(["a"], [], predicted=[])


def test_agreement_with_sceneworld_scene_graphs(checker: AttachmentChecker) -> None:
    from sceneworld.dataset import generate_graphs

    graphs = generate_graphs(150, seed=11)
    captions = [c["text"] for g in graphs for c in g["captions"]]
    gold = [{ConceptPair(*p) for p in c["pairs"]} for g in graphs for c in g["captions"]]
    report = checker_agreement(captions, gold, checker=checker)
    assert report["gold_pairs"] > 500
    assert report["precision"] >= 0.98 and report["recall"] >= 0.98, report


def test_cli_reads_scene_graphs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graphs = {
        "1": {
            "captions": [
                {"text": "a white car parked on the street", "pairs": [["adjective", "white", "car"]]}
            ]
        },
        "0": {"captions": [{"text": "a man sitting on a chair", "pairs": [["verb", "sit", "man"]]}]},
    }
    (tmp_path / "scene_graphs.json").write_text(json.dumps(graphs), encoding="utf-8")
    texts, gold = scene_graph_captions(tmp_path, limit=1)
    assert texts == ["a man sitting on a chair"] and gold == [{verb("sit", "man")}]
    assert main(["--data", str(tmp_path), "--captions", "10"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["captions"] == 2 and report["precision"] == 1.0 and report["recall"] == 1.0
