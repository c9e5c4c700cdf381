"""No held-out pair leaks into a systematicity split's training set. SceneWorld records every
caption's true pairs; the split uses them (not the parser, which misses e.g. "a red pony eating grass")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import export.data.splits as splits_module
from export.data.coco_captions import CaptionDataset
from export.data.pairs import caption_pairs_truth
from export.data.splits import Split, build_split
from sceneworld.dataset import generate_graphs
from service.text.concepts import ConceptPair, load_concepts

C = load_concepts()
GROUPS = range(1, len(C.pair_groups) + 1)
IMAGES, SEED = 3000, 0  # seed 0 as the training worlds; the parser path leaks "eat horse" here


def graphs_dataset(graphs: list[dict[str, Any]]) -> CaptionDataset:
    ids = [int(g.get("image_id", k)) for k, g in enumerate(graphs)]
    return CaptionDataset(
        root=Path("."),
        image_ids=ids,
        file_names=dict.fromkeys(ids, ""),
        captions={i: [c["text"] for c in g["captions"]] for i, g in zip(ids, graphs, strict=True)},
        object_counts={i: len(g["objects"]) for i, g in zip(ids, graphs, strict=True)},
        scenes=dict(zip(ids, graphs, strict=True)),
    )


def truth_of(ds: CaptionDataset) -> dict[int, list[set[ConceptPair]]]:
    """Recorded pairs per caption, read straight from the scene graphs (independent of the split code)."""
    assert ds.scenes is not None
    return {
        i: [{ConceptPair(*p) for p in c["pairs"]} for c in ds.scenes[i]["captions"]] for i in ds.image_ids
    }


def leaked_captions(split: Split, truth: dict[int, list[set[ConceptPair]]]) -> list[tuple[int, int]]:
    """(image, caption index) of every training caption that truly mentions a held-out pair."""
    group = set(split.pairs)
    return [(i, k) for i in split.sets["train"] for k, found in enumerate(truth[i]) if found & group]


@pytest.fixture(scope="module")
def world() -> CaptionDataset:
    return graphs_dataset(generate_graphs(IMAGES, SEED))


@pytest.fixture(scope="module")
def splits(world: CaptionDataset) -> dict[int, Split]:
    return {g: build_split(world, "systematicity", group=g, seed=0) for g in GROUPS}


def test_world_pairs_use_inventory_names(world: CaptionDataset) -> None:
    truth = truth_of(world)
    recorded = {p for found in truth.values() for caption in found for p in caption}
    modifiers = {"adjective": set(C.colours) | set(C.sizes), "verb": set(C.verbs)}
    assert all(p.noun in C.nouns and p.modifier in modifiers[p.kind] for p in recorded)
    for g in GROUPS:  # every held-out pair is one the world's captions mention, under the same name
        assert set(C.group(g)) <= recorded, g
    assert caption_pairs_truth(world) == {i: [frozenset(c) for c in found] for i, found in truth.items()}


def test_no_held_out_pair_in_training_captions(world: CaptionDataset, splits: dict[int, Split]) -> None:
    truth = truth_of(world)
    for g, split in splits.items():
        group = set(C.group(g))
        assert split.info["pairs_source"] == "scene_graph" and split.info["parse"] is None
        assert leaked_captions(split, truth) == [], g
        for name in ("train", "test_no_comb"):  # the no-comb images are clean too
            assert not any(f & group for i in split.sets[name] for f in truth[i]), (g, name)
        held = split.sets["val"] + split.sets["test"]
        assert held and all(any(f & group for f in truth[i]) for i in held), g
        gold = {i for i in world.image_ids if any(f & group for f in truth[i])}
        assert set(held) == gold, g
        # mentions (Recall@K buckets): per pair, how many captions of the image truly mention it
        for name in ("val", "test"):
            for p in split.pairs:
                expected = {str(i): n for i in split.sets[name] if (n := sum(p in f for f in truth[i]))}
                assert split.info["mentions"][name][p.label] == expected, (g, name, p.label)


def test_parser_not_used_when_truth_exists(world: CaptionDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the parser was called although the scene graphs record every caption's pairs")

    monkeypatch.setattr(splits_module, "image_caption_pairs", no_parse)
    split = build_split(world, "systematicity", group=4, seed=0, pairs_source="scene_graph")
    assert split.info["pairs_source"] == "scene_graph" and split.info["cache"] is None


def pony_world() -> list[dict[str, Any]]:
    """Two hand-made scenes: image 0's only caption with "eat horse" is one the parser misses."""
    horse = {"noun": "horse", "colour": "red", "size": "big", "action": "eat"}
    cat = {"noun": "cat", "colour": "gray", "size": "small", "action": "sit"}
    return [
        {
            "image_id": 0,
            "objects": [horse],
            "captions": [
                {
                    "text": "a red pony eating grass",
                    "pairs": [["adjective", "red", "horse"], ["verb", "eat", "horse"]],
                },
                {"text": "a horse on the grass", "pairs": []},
            ],
        },
        {
            "image_id": 1,
            "objects": [cat],
            "captions": [
                {"text": "a cat sitting on the floor", "pairs": [["verb", "sit", "cat"]]},
                {"text": "a gray kitten", "pairs": [["adjective", "gray", "cat"]]},
            ],
        },
        {
            "image_id": 2,
            "objects": [dict(horse, colour="brown")],
            "captions": [{"text": "a horse eating grass", "pairs": [["verb", "eat", "horse"]]}],
        },
    ]


def test_truth_holds_out_what_the_parser_misses() -> None:
    ds = graphs_dataset(pony_world())
    ds.captions[0] = list(reversed(ds.captions[0]))  # matched by text, not position
    split = build_split(ds, "systematicity", group=4, seed=0, cache=None)
    assert split.info["pairs_source"] == "scene_graph"
    assert sorted(split.sets["val"] + split.sets["test"]) == [0, 2]
    assert 0 not in split.sets["train"]
    held = {**split.info["mentions"]["val"]["eat horse"], **split.info["mentions"]["test"]["eat horse"]}
    assert held == {"0": 1, "2": 1}


def test_falls_back_to_parser_without_recorded_pairs() -> None:
    graphs = pony_world()
    ds = graphs_dataset(graphs)
    ds.captions[1] = ["a cat sitting on the floor", "a caption the scene graph does not hold"]
    assert caption_pairs_truth(ds) is None
    with pytest.raises(ValueError, match="scene_graph"):
        build_split(ds, "systematicity", group=4, pairs_source="scene_graph", cache=None)
    with pytest.raises(ValueError, match="pairs_source"):
        build_split(ds, "systematicity", group=4, pairs_source="oracle", cache=None)
    bad = pony_world()
    bad[0]["captions"][0]["pairs"] = [["verb", "eat", "pony"]]  # not the inventory's canonical noun
    with pytest.raises(ValueError, match="inventory"):
        caption_pairs_truth(graphs_dataset(bad))
