"""Probe sets as data (``export/probesets`` writes, ``service/probesets/read.py`` reads): the tiny build's
SceneWorld sets, a COCO-format folder through ``compcap probeset``, ``compcap probesets --repo``, and
the errors of bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compcap_lab.pipeline.zoo import EVAL_SEED
from export.data.splits import load_split
from export.probesets import KINDS, PROBE_SEED_OFFSET, ZOO_EVAL_SEED, probe_seed
from export.probesets.coco import coco_probe_set
from sceneworld.dataset import TEST_SEED_OFFSET, generate_one
from service import cli
from service.manifest import Manifest, load_manifest, load_probe_index, repo_probe_set_entries
from service.probesets import ProbeSet, ProbeSetError, load_probe_set, repo_probe_sets
from service.text.concepts import ConceptPair, load_concepts
from service.text.vocabulary import tokenize


@pytest.fixture(scope="module")
def sets(tiny_repo: Path, manifest: Manifest) -> dict[str, ProbeSet]:
    return repo_probe_sets(tiny_repo, manifest)


def _carried(scene: dict[str, Any], pair: ConceptPair) -> bool:
    return any(
        o["noun"] == pair.noun and pair.modifier in (o["colour"], o["size"], o["action"])
        for o in scene["objects"]
    )


def _atoms(scene: dict[str, Any]) -> set[str]:
    return {a for o in scene["objects"] for a in (o["noun"], o["colour"], o["size"], o["action"]) if a}


def _mentioned(scene: dict[str, Any], pair: ConceptPair) -> bool:
    return any([pair.kind, pair.modifier, pair.noun] in c["pairs"] for c in scene["captions"])


# ----------------------------------------------------------------------------------- the tiny build
def test_the_build_lists_its_probe_sets(
    tiny_repo: Path, manifest: Manifest, sets: dict[str, ProbeSet]
) -> None:
    assert [e.name for e in manifest.probe_sets] == list(KINDS)
    for entry in manifest.probe_sets:
        probe = sets[entry.name]
        assert manifest.probe_set(entry.name) is entry
        assert (entry.kind, entry.path, entry.scene_graphs) == (entry.name, f"probes/{entry.name}", True)
        assert entry.images == len(probe.image_ids) > 0
        assert probe.root == tiny_repo / entry.path and probe.has_scene_graphs
        assert entry.world_seed == probe.info["world_seed"] == probe_seed(0)
        assert len(set(probe.image_ids)) == len(probe.image_ids)
        assert all(len(probe.captions[i]) == 5 for i in probe.image_ids)
        pixels = probe.images(list(probe.image_ids[:3]), manifest.image.height, manifest.image.width)
        assert (
            pixels.shape == (3, manifest.image.height, manifest.image.width, 3) and pixels.dtype == np.uint8
        )
    with pytest.raises(KeyError):
        manifest.probe_set("nope")


def test_probe_world_is_its_own(tiny_repo: Path, sets: dict[str, ProbeSet], manifest: Manifest) -> None:
    """The probe world's seed is none of the training, test or zoo evaluation worlds', and its images
    differ from the training world's images of the same ids."""
    train_seed = json.loads((tiny_repo / "build_report.json").read_text())["seed"]
    assert ZOO_EVAL_SEED == EVAL_SEED and PROBE_SEED_OFFSET != TEST_SEED_OFFSET
    world = probe_seed(train_seed)
    assert world not in (train_seed, train_seed + TEST_SEED_OFFSET, EVAL_SEED)
    probe = sets["systematicity"]
    size = manifest.image.height
    for i in probe.image_ids[:5]:
        image, captions, graph = generate_one(i, world, size)
        assert captions == probe.captions[i] and graph == probe.scenes[i]  # type: ignore[index]
        assert np.array_equal(probe.images([i], size, size)[0], image)
        train_image, _, train_graph = generate_one(i, train_seed, size)
        assert train_graph != graph and not np.array_equal(train_image, image)


def test_systematicity_comb_and_no_comb(sets: dict[str, ProbeSet]) -> None:
    probe = sets["systematicity"]
    pairs = probe.pairs()
    groups = load_concepts().pair_groups
    assert [(p.pair, p.group) for p in pairs] == [(p, g) for g, ps in enumerate(groups, 1) for p in ps]
    per_pair = probe.info["per_pair"]
    used = [i for p in pairs for i in (*p.comb, *p.no_comb)]
    assert len(used) == len(set(used)) == len(probe.image_ids) == 2 * per_pair * 24
    assert probe.scenes is not None
    for p in pairs:
        assert len(p.comb) == len(p.no_comb) == per_pair
        for i in p.comb:
            scene = probe.scenes[i]
            assert _carried(scene, p.pair) and _mentioned(scene, p.pair)
        for i in p.no_comb:
            scene = probe.scenes[i]
            assert {p.pair.modifier, p.pair.noun} <= _atoms(scene)
            assert not _carried(scene, p.pair) and not _mentioned(scene, p.pair)
    with pytest.raises(ProbeSetError, match="systematicity, not productivity"):
        probe.buckets("density")


def test_systematicity_splits_select_the_probe_images(sets: dict[str, ProbeSet]) -> None:
    probe = sets["systematicity"]
    for g in range(1, 5):
        split = load_split(probe.root / "splits" / f"systematicity_{g}")
        mine = [p for p in probe.pairs() if p.group == g]
        assert (split.kind, split.group, split.pairs) == ("systematicity", g, [p.pair for p in mine])
        assert split.sets["test"] == sorted({i for p in mine for i in p.comb})
        assert split.sets["test_no_comb"] == sorted({i for p in mine for i in p.no_comb})
        assert split.sets["train"] == split.sets["val"] == []
    full = load_split(probe.root / "splits" / "full")
    assert full.sets["test"] == sorted(probe.image_ids)


def test_productivity_buckets(sets: dict[str, ProbeSet]) -> None:
    probe = sets["productivity"]
    objects = probe.objects()
    assert objects is not None and probe.scenes is not None
    density = probe.buckets("density")
    assert sorted(density) == ["1", "2", "3", "4"]
    for key, ids in density.items():
        assert len(ids) == probe.info["per_bucket"]
        assert all(len(objects[i]) == int(key) == len(probe.scenes[i]["objects"]) for i in ids)
    length = probe.buckets("length")
    assert sorted(i for ids in length.values() for i in ids) == sorted(probe.image_ids)
    e1, e2 = probe.info["length_edges"]

    def mean(i: int) -> float:
        return float(np.mean([len(tokenize(c)) for c in probe.captions[i]]))

    assert all(mean(i) <= e1 for i in length["short"]) and all(mean(i) > e2 for i in length["long"])
    assert all(e1 < mean(i) <= e2 for i in length["medium"])
    assert probe.cider() is not None
    with pytest.raises(ProbeSetError, match="by must be"):
        probe.buckets("size")  # type: ignore[arg-type]


def test_substitutivity_pairs_and_table(sets: dict[str, ProbeSet]) -> None:
    probe = sets["substitutivity"]
    assert probe.scenes is not None
    pairs = probe.substitution_pairs()
    nouns = load_concepts().nouns
    assert pairs and all(category in nouns for category, _, _ in pairs)
    used = [i for _, _, ids in pairs for i in ids]
    assert len(used) == len(set(used)) == len(probe.image_ids)
    for category, _, ids in pairs:
        assert len(ids) == probe.info["per_pair"]
        assert all(category in {o["noun"] for o in probe.scenes[i]["objects"]} for i in ids)
    table = dict(probe.substitutions())
    assert (
        table["puppy"] == "dog" and table["puppies"] == "dogs"
    )  # singular and plural, S1 fine -> S2 category
    assert probe.info["min_count"] == 3 and probe.info["synonym_counts"]
    cider = probe.cider()
    assert cider is not None and cider.ref_count > 0
    with pytest.raises(ProbeSetError):
        probe.pairs()


def test_probesets_command_rewrites_an_existing_repository(
    tiny_repo: Path, sets: dict[str, ProbeSet], tmp_path: Path
) -> None:
    """``compcap probesets --repo`` adds the sets to a repository built without them (same images)."""
    work = tiny_repo.with_name(tiny_repo.name + ".work")
    if not (work / "data" / "train" / "captions.json").is_file():
        pytest.skip("the tiny repository's work folder is not there")
    repo = tmp_path / "repo"
    repo.mkdir()
    data = json.loads((tiny_repo / "manifest.json").read_text())
    data.pop("probe_sets")
    (repo / "manifest.json").write_text(json.dumps(data))
    before = (repo / "manifest.json").read_bytes()
    assert cli.main(["probesets", "--repo", str(repo), "--work", str(work), "--kind", "productivity"]) == 0
    manifest = load_manifest(repo)
    # listed in the probe index beside the sets; the repository's own manifest is not touched
    assert (repo / "manifest.json").read_bytes() == before and manifest.probe_sets == []
    assert [e.name for e in repo_probe_set_entries(repo, manifest)] == ["productivity"]
    assert [e.name for e in load_probe_index(repo)] == ["productivity"]
    again = repo_probe_sets(repo, manifest)["productivity"]
    assert again.image_ids == sets["productivity"].image_ids
    assert again.info["density"] == sets["productivity"].info["density"]


def test_probesets_renders_the_training_world_a_shipped_repository_lacks(
    tiny_repo: Path, sets: dict[str, ProbeSet], tmp_path: Path
) -> None:
    """A repository shipped without its work folder (as the default one in git): ``compcap probesets``
    renders the training world from ``build_report.json``'s seed and writes the same probe images."""
    repo = tmp_path / "shipped"
    repo.mkdir()
    data = json.loads((tiny_repo / "manifest.json").read_text())
    data.pop("probe_sets")
    (repo / "manifest.json").write_text(json.dumps(data))
    (repo / "build_report.json").write_text((tiny_repo / "build_report.json").read_text())
    assert cli.main(["probesets", "--repo", str(repo), "--kind", "productivity"]) == 0
    assert (tmp_path / "shipped.work" / "data" / "train" / "captions.json").is_file()
    again = repo_probe_sets(repo, load_manifest(repo))["productivity"]
    assert again.image_ids == sets["productivity"].image_ids


def test_old_manifests_load_without_probe_sets(tiny_repo: Path) -> None:
    data = json.loads((tiny_repo / "manifest.json").read_text())
    data.pop("probe_sets", None)
    manifest = Manifest.model_validate(data)
    assert manifest.probe_sets == []
    with pytest.raises(KeyError):
        manifest.probe_set("systematicity")
    assert repo_probe_sets(tiny_repo, manifest) == {}


# ----------------------------------------------------------------------------------- COCO folders
@pytest.fixture(scope="module")
def coco_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A COCO-format folder (captions.json, images, instances.json with COCO boxes) made of SceneWorld
    images, without scene graphs."""
    from tests.hf_repo import coco_folder as make

    return make(tmp_path_factory.mktemp("coco"), images=160, seed=11)


@pytest.mark.parametrize("kind", KINDS)
def test_probeset_command_on_a_coco_folder(coco_folder: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / kind
    argv = ["probeset", "--data", str(coco_folder), "--kind", kind, "--out", str(out), "--per-pair", "3"]
    assert cli.main([*argv, "--min-count", "3", "--seed", "1"]) == 0
    probe = load_probe_set(out)
    # no SceneWorld scene graphs: the instance boxes stand in for them (explanations' grounding)
    assert (probe.kind, probe.name, probe.has_scene_graphs, probe.info["world_seed"]) == (
        kind,
        kind,
        True,
        None,
    )
    instances = json.loads((coco_folder / "instances.json").read_text())
    for i in probe.image_ids:
        assert probe.scenes is not None and probe.scenes[i]["size"] == [32, 32]
        boxes = [a["bbox"] for a in instances["annotations"] if a["image_id"] == i]
        assert [o["bbox"] for o in probe.scenes[i]["objects"]] == [
            [x, y, x + w, y + h] for x, y, w, h in boxes
        ]
    assert probe.info["source"] == str(coco_folder.resolve())
    assert len(set(probe.image_ids)) == len(probe.image_ids) > 0
    original = json.loads((coco_folder / "captions.json").read_text())
    refs: dict[int, list[str]] = {}
    for a in original["annotations"]:
        refs.setdefault(a["image_id"], []).append(a["caption"])
    assert all(probe.captions[i] == refs[i] for i in probe.image_ids)
    assert probe.images(list(probe.image_ids), 32, 32).shape == (len(probe.image_ids), 32, 32, 3)
    if kind == "systematicity":
        used = [i for p in probe.pairs() for i in (*p.comb, *p.no_comb)]
        assert len(used) == len(set(used)) == len(probe.image_ids)
        assert all(len(p.comb) <= 3 and len(p.no_comb) <= 3 for p in probe.pairs())
        assert any(p.comb for p in probe.pairs()) and any(p.no_comb for p in probe.pairs())
        for g in range(1, 5):
            split = load_split(out / "splits" / f"systematicity_{g}")
            assert split.sets["test"] == sorted({i for p in probe.pairs() if p.group == g for i in p.comb})
    elif kind == "productivity":
        objects = probe.objects()
        assert objects is not None and set(objects) == set(probe.image_ids)
        for key, ids in probe.buckets("density").items():
            assert all(min(len(objects[i]), 4) == int(key) for i in ids)
        assert sorted(i for ids in probe.buckets("length").values() for i in ids) == sorted(probe.image_ids)
        assert probe.cider() is not None
    else:
        assert probe.substitution_pairs() and dict(probe.substitutions()).get("puppy") in (None, "dog")
        assert probe.cider() is not None


def test_bad_input_gives_clear_errors(coco_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        coco_probe_set(coco_folder, "novelty", tmp_path / "x")
    with pytest.raises(SystemExit):
        cli.main(["probeset", "--data", str(coco_folder), "--kind", "novelty", "--out", str(tmp_path / "x")])
    with pytest.raises(FileNotFoundError, match=r"captions\.json"):
        coco_probe_set(tmp_path, "productivity", tmp_path / "x")
    out = tmp_path / "p"
    coco_probe_set(coco_folder, "productivity", out, per_pair=2)
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "captions.json").unlink()
    with pytest.raises(ProbeSetError, match=r"captions\.json is missing"):
        load_probe_set(broken)
    shutil.rmtree(broken)
    shutil.copytree(out, broken)
    info = json.loads((broken / "probe.json").read_text())
    (broken / "probe.json").write_text(json.dumps({**info, "kind": "novelty"}))
    with pytest.raises(ProbeSetError, match="kind 'novelty'"):
        load_probe_set(broken)
    (broken / "probe.json").write_text(json.dumps({**info, "density": {"1": [10**9]}}))
    with pytest.raises(ProbeSetError, match="density"):
        load_probe_set(broken)
    with pytest.raises(ProbeSetError, match="does not exist"):
        load_probe_set(tmp_path / "nowhere")
