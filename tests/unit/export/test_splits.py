"""COCO-format loading and the compositional splits, on a small SceneWorld dataset and on a COCO-format
fixture with a Karpathy split file and an instances file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from export.data.coco_captions import CaptionDataset, load_captions, load_folder
from export.data.pairs import image_caption_pairs
from export.data.splits import (
    Split,
    build_split,
    candidate_table,
    load_split,
    run_splits_cli,
    write_split,
)
from sceneworld.dataset import write_dataset
from service.text.attachment import AttachmentChecker
from service.text.concepts import ConceptPair, load_concepts
from service.text.vocabulary import tokenize

C = load_concepts()


@pytest.fixture(scope="module")
def checker() -> AttachmentChecker:
    return AttachmentChecker()


@pytest.fixture(scope="module")
def sw_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sceneworld")
    write_dataset(folder, images=300, seed=3, image_size=32, progress=False)
    return folder


@pytest.fixture(scope="module")
def sw(sw_folder: Path) -> CaptionDataset:
    return load_folder(sw_folder)


@pytest.fixture(scope="module")
def sw_sys(sw: CaptionDataset, tmp_path_factory: pytest.TempPathFactory) -> Split:
    """Held out by the pairs the scene graphs record per caption (no parse)."""
    cache = tmp_path_factory.mktemp("cache") / "pairs.json"
    return build_split(sw, "systematicity", group=1, seed=0, cache=cache)


@pytest.fixture(scope="module")
def sw_parsed(
    sw: CaptionDataset, checker: AttachmentChecker, tmp_path_factory: pytest.TempPathFactory
) -> Split:
    """The same split through the attachment checker (the path datasets without recorded pairs take)."""
    cache = tmp_path_factory.mktemp("cache") / "pairs.json"
    return build_split(
        sw, "systematicity", group=1, checker=checker, seed=0, cache=cache, pairs_source="parser"
    )


# image id -> captions; group 1 = black cat, big bird, red bus, small plane, eat man, lie woman
COCO_CAPTIONS = {
    1: ["A black cat sitting on a couch.", "A cat on a couch."],
    2: ["A man is eating a sandwich.", "Someone with food."],
    3: ["The cat is black.", "A pet indoors."],
    4: ["A black dog next to a white cat.", "Two pets."],  # both constituents, not attached
    5: ["A dog on the grass.", "A brown dog in a park."],
    6: ["A red car on a street.", "A car parked."],
    7: ["A large bird flying over the water.", "A bird in the sky."],
    8: ["A woman laying on a bed.", "A lady resting."],
    9: ["A green bus parked.", "A bus at a stop."],
    10: ["A white horse in a field.", "A horse grazing."],
    11: ["A person holding an umbrella in the rain with a very long caption about nothing much."],
    12: ["A truck.", "A big truck."],
    13: ["A man riding a horse.", "A guy on a horse."],
    14: ["A kitten playing.", "A small kitten on the floor."],
}
HELD_OUT_COCO = {1, 2, 3, 7, 8}
KARPATHY = {1: "train", 2: "val", 3: "test", 4: "restval", 5: "train", 6: "train", 7: "val", 8: "test"}
INSTANCES = {5: 1, 6: 4, 11: 9, 13: 2}


@pytest.fixture(scope="module")
def coco_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("coco")
    images = [{"id": i, "file_name": f"COCO_{i:012d}.jpg"} for i in [*COCO_CAPTIONS, 99]]  # 99: no caption
    annotations = [
        {"id": 1000 + 10 * i + k, "image_id": i, "caption": c}
        for i, caps in COCO_CAPTIONS.items()
        for k, c in enumerate(caps)
    ]
    (folder / "captions.json").write_text(json.dumps({"images": images, "annotations": annotations}))
    karpathy = {"images": [{"cocoid": i, "split": s, "filename": f"{i}.jpg"} for i, s in KARPATHY.items()]}
    (folder / "dataset_coco.json").write_text(json.dumps(karpathy))
    instances = [{"id": k, "image_id": i, "category_id": 1} for i, n in INSTANCES.items() for k in range(n)]
    (folder / "instances.json").write_text(json.dumps({"annotations": instances}))
    return {
        "folder": folder,
        "captions": folder / "captions.json",
        "karpathy": folder / "dataset_coco.json",
        "instances": folder / "instances.json",
    }


def group_pairs(group: int) -> set[ConceptPair]:
    return set(C.group(group))


def assert_disjoint(split: Split, ids: list[int]) -> None:
    seen: set[int] = set()
    for name, members in split.sets.items():
        assert len(set(members)) == len(members), name
        assert not seen & set(members), name
        seen |= set(members)
    assert seen <= set(ids)


# -------------------------------------------------------------------------------------------- loading
def test_load_folder_sceneworld(sw: CaptionDataset) -> None:
    assert len(sw) == 300 and sw.image_ids == list(range(300))
    assert all(len(sw.captions[i]) == 5 for i in sw.image_ids)
    assert sw.file_names[7] == "images/000007.png" and (sw.root / sw.file_names[7]).is_file()
    assert sw.scenes is not None and sw.object_counts is not None
    assert sw.object_counts[0] == len(sw.scenes[0]["objects"]) >= 1
    assert sw.karpathy is None


def test_load_captions_coco(coco_files: dict[str, Path]) -> None:
    ds = load_captions(coco_files["captions"], coco_files["karpathy"], coco_files["instances"])
    assert ds.image_ids == sorted(COCO_CAPTIONS)  # image 99 has no caption
    assert ds.captions[1] == COCO_CAPTIONS[1]
    assert ds.file_names[1] == "COCO_000000000001.jpg"
    assert ds.karpathy is not None and ds.karpathy[4] == "restval"
    assert ds.object_counts is not None
    assert ds.object_counts[11] == 9 and ds.object_counts[1] == 0
    folder = load_folder(coco_files["folder"])  # same files found by name
    assert folder.karpathy == ds.karpathy and folder.object_counts == ds.object_counts
    assert folder.scenes is None


# -------------------------------------------------------------------------------------------- systematicity
def recorded_pairs(sw: CaptionDataset, i: int) -> list[set[ConceptPair]]:
    assert sw.scenes is not None
    return [{ConceptPair(*p) for p in c["pairs"]} for c in sw.scenes[i]["captions"]]


def test_systematicity_sceneworld(sw: CaptionDataset, sw_sys: Split) -> None:
    split = sw_sys
    group = group_pairs(1)
    assert split.kind == "systematicity" and split.group == 1 and set(split.pairs) == group
    assert set(split.sets) == {"train", "val", "test", "test_no_comb"}
    assert_disjoint(split, sw.image_ids)
    covered = set().union(*map(set, split.sets.values()))
    assert covered == set(sw.image_ids)
    # independent re-check against the pairs the scene graphs record per caption
    assert split.info["pairs_source"] == "scene_graph" and split.info["parse"] is None
    for name in ("train", "test_no_comb"):
        assert not any(found & group for i in split.sets[name] for found in recorded_pairs(sw, i)), name
    for name in ("val", "test"):
        assert split.sets[name]
        for i in split.sets[name]:
            assert any(found & group for found in recorded_pairs(sw, i)), (name, i)
    assert len(split.sets["test_no_comb"]) == len(split.sets["test"])
    assert abs(len(split.sets["val"]) - len(split.sets["test"])) <= 1
    assert sw.scenes is not None
    for i in split.sets["test_no_comb"]:  # no pair of the group has both constituents in the scene
        atoms = {v for o in sw.scenes[i]["objects"] for v in (o["noun"], o["colour"], o["size"], o["action"])}
        assert not any(p.modifier in atoms and p.noun in atoms for p in group), i
    info = split.info
    assert info["counts"]["test"] == len(split.sets["test"])
    assert sum(info["pair_images"]["held_out"].values()) >= len(split.sets["val"]) + len(split.sets["test"])
    assert info["test_no_comb"]["presence"] == "scene_graph" and info["test_no_comb"]["shortfall"] == 0


def test_systematicity_agrees_with_scene_graph_mentions(
    sw: CaptionDataset, sw_sys: Split, sw_parsed: Split
) -> None:
    """The held-out images are exactly those whose captions' recorded pairs include a group pair; the
    parser's held-out images nearly so."""
    group = group_pairs(1)
    gold = {i for i in sw.image_ids if any(found & group for found in recorded_pairs(sw, i))}
    assert set(sw_sys.sets["val"]) | set(sw_sys.sets["test"]) == gold
    parsed = set(sw_parsed.sets["val"]) | set(sw_parsed.sets["test"])
    assert len(parsed ^ gold) <= max(1, len(gold) // 50)


def test_systematicity_deterministic_and_cached(
    sw: CaptionDataset, sw_sys: Split, sw_parsed: Split, checker: AttachmentChecker, tmp_path: Path
) -> None:
    assert build_split(sw, "systematicity", group=1, seed=0).sets == sw_sys.sets
    assert sw_parsed.info["pairs_source"] == "parser"
    cache = Path(sw_parsed.info["cache"])
    assert cache.is_file() and sw_parsed.info["parse"]["parsed"] > 0
    again = build_split(
        sw, "systematicity", group=1, checker=checker, seed=0, cache=cache, pairs_source="parser"
    )
    assert again.sets == sw_parsed.sets
    assert again.info["parse"]["parsed"] == 0  # everything came from the cache
    other = build_split(
        sw, "systematicity", group=1, seed=1, cache=cache, pairs_source="parser"
    )  # no checker
    assert set(other.sets["val"]) | set(other.sets["test"]) == set(sw_parsed.sets["val"]) | set(
        sw_parsed.sets["test"]
    )
    assert other.sets["val"] != sw_parsed.sets["val"]
    path = write_split(sw_sys, tmp_path / "g1")
    assert path == tmp_path / "g1" / "split.json"
    loaded = load_split(path)
    assert loaded.sets == sw_sys.sets and loaded.pairs == sw_sys.pairs and loaded.group == 1
    assert load_split(tmp_path / "g1").kind == "systematicity"


def test_cache_invalidated_by_other_identity(sw: CaptionDataset, tmp_path: Path) -> None:
    cache = tmp_path / "pairs.json"
    cache.write_text(json.dumps({"key": "another-model|rules0|x", "pairs": {}}))
    ids = sw.image_ids[:4]
    small = CaptionDataset(sw.root, ids, {i: sw.file_names[i] for i in ids}, {i: sw.captions[i] for i in ids})
    _, stats = image_caption_pairs(small, cache=cache)
    assert stats["parsed"] == stats["distinct"] > 0
    assert json.loads(cache.read_text())["key"] != "another-model|rules0|x"


def test_systematicity_coco(coco_files: dict[str, Path], checker: AttachmentChecker) -> None:
    ds = load_captions(coco_files["captions"])
    split = build_split(ds, "systematicity", group=1, checker=checker, seed=0, cache=None)
    assert set(split.sets["val"]) | set(split.sets["test"]) == HELD_OUT_COCO
    assert_disjoint(split, ds.image_ids)
    assert len(split.sets["test_no_comb"]) == len(split.sets["test"])
    assert split.info["test_no_comb"]["presence"] == "caption_words"
    assert split.info["pairs_source"] == "parser"  # no scene graphs: the attachment checker decides
    # image 4 mentions black and cat (unattached): not held out, but not a no-comb image either;
    # image 12 mentions "big" and ... no bird; image 14 "small" without plane -> eligible
    assert 4 in split.sets["train"]
    assert 4 not in split.sets["test_no_comb"]
    assert split.info["pair_images"]["held_out"] == {
        "black cat": 2,
        "big bird": 1,
        "red bus": 0,
        "small plane": 0,
        "eat man": 1,
        "lie woman": 1,
    }
    assert split.info["cache"] is None


# -------------------------------------------------------------------------------------------- productivity
def mean_length(ds: CaptionDataset, i: int) -> float:
    return float(np.mean([len(tokenize(c)) for c in ds.captions[i]]))


def test_productivity_length(sw: CaptionDataset) -> None:
    split = build_split(sw, "productivity", seed=0, by="length", fraction=0.1)
    assert set(split.sets) == {"train", "val", "test_base", "test_rich"}
    assert_disjoint(split, sw.image_ids)
    rich, train = split.sets["test_rich"], split.sets["train"]
    assert len(rich) == len(split.sets["test_base"]) == len(split.sets["val"]) == 30
    assert len(train) == 300 - 90
    assert min(mean_length(sw, i) for i in rich) >= max(mean_length(sw, i) for i in train)
    assert split.info["mean_score"]["test_rich"] > split.info["mean_score"]["train"] + 1
    assert build_split(sw, "productivity", seed=0, by="length", fraction=0.1).sets == split.sets
    assert build_split(sw, "productivity", seed=0, by="length", count=12).info["counts"]["test_rich"] == 12


def test_productivity_density(sw: CaptionDataset, coco_files: dict[str, Path]) -> None:
    split = build_split(sw, "productivity", seed=2, by="density", count=40)
    assert set(split.sets) == {"train", "val", "test_base", "test_dense"}
    assert_disjoint(split, sw.image_ids)
    counts = sw.object_counts
    assert counts is not None
    dense, train = split.sets["test_dense"], split.sets["train"]
    assert min(counts[i] for i in dense) >= max(counts[i] for i in train)
    assert np.mean([counts[i] for i in dense]) > np.mean([counts[i] for i in train])
    ds = load_captions(coco_files["captions"], instances_json=coco_files["instances"])
    coco = build_split(ds, "productivity", by="density", count=2)
    assert set(coco.sets["test_dense"]) == {11, 6}
    with pytest.raises(ValueError, match="object counts"):
        build_split(load_captions(coco_files["captions"]), "productivity", by="density", count=2)


# ------------------------------------------------------------------------------------ substitutivity, full
def test_substitutivity_keeps_frequent_pairs(sw: CaptionDataset) -> None:
    split = build_split(sw, "substitutivity", seed=0, min_count=25)
    assert_disjoint(split, sw.image_ids)
    words = [w for c in sw.subset_captions(split.sets["train"]) for w in tokenize(c)]
    kept = {(s["category"], s["fine"]) for s in split.info["synonyms"]}
    assert kept, split.info["candidates"]
    for entry in split.info["candidates"]:
        a, b = entry["category"], entry["fine"]
        assert entry["category_count"] >= words.count(a)  # singular at least (+ plural forms)
        frequent = entry["category_count"] >= 25 and entry["fine_count"] >= 25
        assert ((a, b) in kept) == frequent
    assert ("refrigerator", "freezer") not in kept  # COCO-only candidate: absent from SceneWorld
    assert ("dog", "puppy") in {(c["category"], c["fine"]) for c in split.info["candidates"]}
    strict = build_split(sw, "substitutivity", seed=0)  # the paper's 200: nothing is that frequent here
    assert len(strict.info["synonyms"]) < len(kept)
    assert ("person", "man") in candidate_table(C)


def test_full_random_and_karpathy(sw: CaptionDataset, coco_files: dict[str, Path]) -> None:
    split = build_split(sw, "full", seed=4)
    assert [len(split.sets[n]) for n in ("train", "val", "test")] == [240, 30, 30]
    assert_disjoint(split, sw.image_ids)
    assert split.info["source"] == "random"
    ds = load_captions(coco_files["captions"], karpathy_json=coco_files["karpathy"])
    k = build_split(ds, "full")
    assert k.info["source"] == "karpathy"
    assert k.sets == {"train": [1, 4, 5, 6], "val": [2, 7], "test": [3, 8]}


def test_errors(sw: CaptionDataset) -> None:
    with pytest.raises(ValueError, match="kind"):
        build_split(sw, "nonsense")
    with pytest.raises(ValueError, match="group"):
        build_split(sw, "systematicity", group=None)
    with pytest.raises(ValueError, match="by"):
        build_split(sw, "productivity", by="colour")


def test_run_splits_cli(
    sw_folder: Path, sw_sys: Split, sw_parsed: Split, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "split"
    result = run_splits_cli(sw_folder, "systematicity", 1, out)
    assert result["sets"] == {name: len(ids) for name, ids in sw_sys.sets.items()}
    assert result["pairs_source"] == "scene_graph"
    assert (out / "split.json").is_file() and load_split(out).sets == sw_sys.sets
    assert json.loads(capsys.readouterr().out)["group"] == 1
    cache = Path(sw_parsed.info["cache"])
    parsed = run_splits_cli(
        sw_folder, "systematicity", 1, tmp_path / "parsed", cache=cache, pairs_source="parser"
    )
    assert parsed["pairs_source"] == "parser" and parsed["parse"]["parsed"] == 0
    assert load_split(tmp_path / "parsed").sets == sw_parsed.sets
    prod = run_splits_cli(sw_folder, "productivity", None, tmp_path / "p", by="density")
    assert "test_dense" in prod["sets"]
