"""Probe sets from any COCO-format folder (``compcap probeset --data DIR --kind K --out DIR``), chosen
through the split code of ``compcap-lab splits`` (``export.data.splits.build_split``, seeded):

* systematicity — per group 1..4 the group's systematicity split (spaCy ``AttachmentChecker``, its
  caption-pairs cache next to the data when writable): comb images of a pair are ``test`` images a
  reference of which mentions the pair attached; no_comb images are images no reference of which
  mentions any pair of the group (the split's ``train`` and ``test_no_comb``) in which both
  constituents of the pair are present (``constituents_present``: the scene graph when the folder
  has one, else both words in some reference). (The split's own ``test_no_comb`` holds images where
  *no* pair of the group has both constituents, so it cannot serve as no_comb.)
* productivity — images of the ``full`` split's ``test`` set (the Karpathy test split when the folder
  has one, else a random 10%): ``per_pair`` per object count 1, 2, 3, "4" (four or more; instance
  annotations of ``instances.json`` or scene-graph objects), else ``4 x per_pair`` images and no
  density buckets; length terciles over the chosen images.
* substitutivity — ``test`` images of the substitutivity split whose references contain the fine or the
  category word (singular or plural) of a candidate pair; the S1 -> S2 table from the split's
  ``info["synonyms"]`` (both words >= ``min_count`` times in its training captions).

Images are copied (``images/<id><suffix>``); CIDEr-D document frequencies come from the split's
``train`` references. Pairs are filled in order of how few candidates they have; ids are unique.

With ``repo`` (``compcap probeset --repo REPO``) the set is written into the model repository
(``<repo>/probes/<name>``, or the folder of ``<repo>/probes/`` that ``out`` names) and listed in its manifest,
so the gateway's live probes serve it (``probe_set`` of ``POST /v1/probes``) on any captioner.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from export.data.coco_captions import INSTANCES_NAMES, CaptionDataset, load_folder
from export.data.pairs import default_cache_path
from export.data.splits import Split, build_split, constituents_present
from export.probesets import KINDS
from export.probesets.tables import (
    length_terciles,
    pair_record,
    scene_carries,
    substitutions,
    systematicity_splits,
)
from export.probesets.write import ProbeContent, write_probe_set
from service.checks import at_least
from service.evaluation.cider import CiderD
from service.manifest import MANIFEST_NAME, ProbeSetEntry
from service.text.concepts import ConceptPair, load_concepts
from service.text.synonyms import candidate_table, plural
from service.text.vocabulary import tokenize


def _take(candidates: Sequence[int], used: set[int], limit: int, rng: np.random.Generator) -> list[int]:
    """Up to ``limit`` unused ids of ``candidates``, in a seeded random order; marks them used."""
    ordered = sorted(set(candidates) - used)
    chosen = sorted(ordered[k] for k in rng.permutation(len(ordered))[:limit])
    used.update(chosen)
    return chosen


def _systematicity(
    ds: CaptionDataset, per_pair: int, seed: int, cache: Path
) -> tuple[dict[str, Any], list[Split], list[int]]:
    from service.text.attachment import AttachmentChecker

    concepts = load_concepts()
    checker = AttachmentChecker(concepts)
    rng = np.random.default_rng(seed)
    used: set[int] = set()
    records: list[dict[str, Any]] = []
    mentions: dict[int, dict[ConceptPair, int]] = {}
    shortfall: dict[str, int] = {}
    for group in range(1, len(concepts.pair_groups) + 1):
        pairs = concepts.group(group)
        try:
            split = build_split(ds, "systematicity", group=group, checker=checker, seed=seed, cache=cache)
            test_mentions = split.info["mentions"]["test"]
            clean = split.sets["train"] + split.sets["test_no_comb"]
        except ValueError:  # fewer than 2 images mention a pair of the group: no comb images
            test_mentions, clean = {p.label: {} for p in pairs}, []
        comb_pool = {p: [int(i) for i in test_mentions[p.label]] for p in pairs}
        present, _ = constituents_present(ds, pairs, concepts)
        scenes = ds.scenes if ds.scenes is not None and all(i in ds.scenes for i in clean) else None
        no_comb_pool = {  # with scene graphs: also no object carries the pair
            p: [i for i in clean if p in present[i] and not (scenes and scene_carries(scenes[i], p))]
            for p in pairs
        }
        comb = {
            p: _take(comb_pool[p], used, per_pair, rng)
            for p in sorted(pairs, key=lambda p: len(comb_pool[p]))
        }
        no_comb = {
            p: _take(no_comb_pool[p], used, per_pair, rng)
            for p in sorted(pairs, key=lambda p: len(no_comb_pool[p]))
        }
        for p in pairs:
            records.append(pair_record(p, group, comb[p], no_comb[p]))
            for i in comb[p]:
                mentions.setdefault(i, {})[p] = int(test_mentions[p.label][str(i)])
            for part, ids in (("comb", comb[p]), ("no_comb", no_comb[p])):
                if len(ids) < per_pair:
                    shortfall[f"{p.label}/{part}"] = per_pair - len(ids)
    info = {
        "source": str(ds.root),
        "world_seed": None,
        "presence": "caption_words" if ds.scenes is None else "scene_graph",
    }
    splits = systematicity_splits(records, mentions, info)
    extra = {"per_pair": per_pair, "pairs": records, "shortfall": shortfall}
    return extra, splits, sorted(used)


def _instances(folder: Path, ids: Sequence[int]) -> dict[int, list[tuple[str, dict[str, Any]]]] | None:
    """Each image's instance annotations (``instances.json``) with their category names, None without
    the file."""
    path = next((folder / n for n in INSTANCES_NAMES if (folder / n).is_file()), None)
    if path is None:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    names = {int(c["id"]): str(c["name"]) for c in data.get("categories", [])}
    out: dict[int, list[tuple[str, dict[str, Any]]]] = {int(i): [] for i in ids}
    for ann in data["annotations"]:
        image_id = int(ann["image_id"])
        if image_id in out:
            name = names.get(int(ann.get("category_id", -1)), str(ann.get("category_id")))
            out[image_id].append((name, ann))
    return out


def instance_objects(folder: Path, ids: Sequence[int]) -> dict[int, list[str]] | None:
    """Category names of each image's instance annotations (``instances.json``), None without one."""
    found = _instances(folder, ids)
    return None if found is None else {i: [name for name, _ in anns] for i, anns in found.items()}


def instance_scenes(ds: CaptionDataset, ids: Sequence[int]) -> dict[int, dict[str, Any]] | None:
    """Scene graphs made of the images' instance boxes, so that explanations of the probe set's images
    get the pointing game and GroundingScore: ``objects`` (``id``, ``noun`` — the concept inventory's
    noun class of the category name, else the name — and ``bbox`` [x0, y0, x1, y1] from COCO's
    [x, y, w, h]), ``size`` [height, width] of the image the boxes are in (the gateway scales them to
    the size it serves), ``background`` for cells no box covers, no horizon. None without
    ``instances.json`` or when an annotation has no box."""
    from service.text.lexicon import default_lexicon

    found = _instances(ds.root, ids)
    if found is None or any("bbox" not in ann for anns in found.values() for _, ann in anns):
        return None
    lexicon = default_lexicon()
    scenes: dict[int, dict[str, Any]] = {}
    for i, anns in found.items():
        with Image.open(Path(ds.root) / ds.file_names[i]) as im:
            width, height = im.size
        objects = [
            {
                "id": int(ann.get("id", k)),
                "noun": lexicon.noun_class(name) or name,
                "bbox": [float(x), float(y), float(x) + float(w), float(y) + float(h)],
            }
            for k, (name, ann) in enumerate(anns)
            for x, y, w, h in [ann["bbox"]]
        ]
        scenes[i] = {"objects": objects, "size": [height, width], "background": "background", "horizon": 0}
    return scenes


def _productivity(ds: CaptionDataset, per_bucket: int, seed: int) -> tuple[dict[str, Any], list[int], Split]:
    rng = np.random.default_rng(seed)
    full = build_split(ds, "full", seed=seed)
    pool, used = full.sets["test"], set[int]()
    density: dict[str, list[int]] | None = None
    if ds.object_counts is not None:
        counts = ds.object_counts
        density = {
            key: _take([i for i in pool if (min(counts.get(i, 0), 4) == int(key))], used, per_bucket, rng)
            for key in ("4", "3", "2", "1")
        }
        density = {k: density[k] for k in ("1", "2", "3", "4")}
        shortfall = {k: per_bucket - len(v) for k, v in density.items() if len(v) < per_bucket}
    else:
        _take(pool, used, 4 * per_bucket, rng)
        shortfall = {}
    ids = sorted(used)
    objects: dict[int, list[str]] | None
    if ds.scenes is not None and all(i in ds.scenes for i in ids):
        objects = {i: [o["noun"] for o in ds.scenes[i]["objects"]] for i in ids}
    else:
        objects = instance_objects(ds.root, ids)
    length, edges = length_terciles({i: ds.captions[i] for i in ids})
    extra = {
        "per_bucket": per_bucket,
        "objects": None if objects is None else {str(i): v for i, v in objects.items()},
        "density": density,
        "length": length,
        "length_edges": edges,
        "shortfall": shortfall,
        "pool": f"full split test set ({full.info['source']}, {len(pool)} images)",
    }
    return extra, ids, full


def _substitutivity(
    ds: CaptionDataset, per_pair: int, seed: int, min_count: int
) -> tuple[dict[str, Any], list[int], Split]:
    concepts = load_concepts()
    rng = np.random.default_rng(seed)
    split = build_split(ds, "substitutivity", seed=seed, min_count=min_count)
    words = {i: {w for c in ds.captions[i] for w in tokenize(c)} for i in split.sets["test"]}

    def forms(word: str) -> set[str]:
        return {word, plural(word, concepts)}

    table = candidate_table(concepts)
    pool = {(c, f): [i for i, ws in words.items() if ws & (forms(c) | forms(f))] for c, f in table}
    used: set[int] = set()
    chosen = {p: _take(pool[p], used, per_pair, rng) for p in sorted(table, key=lambda p: len(pool[p]))}
    pairs = [{"category": c, "fine": f, "images": chosen[(c, f)]} for c, f in table if chosen[(c, f)]]
    extra = {
        "per_pair": per_pair,
        "pairs": pairs,
        "substitutions": [list(p) for p in substitutions(split.info["synonyms"])],
        "min_count": min_count,
        "synonym_counts": split.info["candidates"],
        "shortfall": {
            f"{c}<->{f}": per_pair - len(chosen[(c, f)]) for c, f in table if len(chosen[(c, f)]) < per_pair
        },
    }
    return extra, sorted(used), split


# a selector's answer: the kind-specific keys, the chosen ids, the splits to write, and the split whose
# train references give the CIDEr-D frequencies and the training references (None: the set keeps none)
Chosen = tuple[dict[str, Any], list[int], list[Split], Split | None]


def _select_systematicity(ds: CaptionDataset, per_pair: int, seed: int, min_count: int) -> Chosen:
    with tempfile.TemporaryDirectory() as tmp:
        cache = default_cache_path(ds) or Path(tmp) / "caption_pairs.json"
        extra, splits, ids = _systematicity(ds, per_pair, seed, cache)
    return extra, ids, splits, None


def _select_productivity(ds: CaptionDataset, per_pair: int, seed: int, min_count: int) -> Chosen:
    extra, ids, split = _productivity(ds, per_pair, seed)
    return extra, ids, [], split


def _select_substitutivity(ds: CaptionDataset, per_pair: int, seed: int, min_count: int) -> Chosen:
    extra, ids, split = _substitutivity(ds, per_pair, seed, min_count)
    return extra, ids, [], split


# format name -> its selector (ds, per_pair, seed, min_count) -> Chosen
SELECTORS: dict[str, Callable[[CaptionDataset, int, int, int], Chosen]] = {
    "systematicity": _select_systematicity,
    "productivity": _select_productivity,
    "substitutivity": _select_substitutivity,
}


def _copier(ds: CaptionDataset) -> Any:
    def save(image_id: int, folder: Path) -> tuple[str, int, int]:
        source = Path(ds.root) / ds.file_names[image_id]
        if not ds.file_names[image_id] or not source.is_file():
            raise FileNotFoundError(f"image {image_id} of {ds.source}: file {source} not found")
        name = f"images/{image_id:06d}{source.suffix.lower()}"
        shutil.copyfile(source, folder / name)
        with Image.open(source) as im:
            width, height = im.size
        return name, width, height

    return save


def _destination(out: Path | None, repo: Path | None, name: str) -> Path:
    """The probe set's folder: ``out``; with ``repo`` by default ``<repo>/probes/<name>``, and always a
    folder of ``<repo>/probes/`` (the folder is replaced: never a model's)."""
    if repo is None:
        if out is None:
            raise ValueError("give the probe set's folder (out) or the repository to add it to (repo)")
        return Path(out)
    if not (Path(repo) / MANIFEST_NAME).is_file():
        raise FileNotFoundError(f"{repo} is not a model repository (no {MANIFEST_NAME})")
    probes = Path(repo) / "probes"
    folder = Path(out) if out is not None else probes / name
    if folder.resolve().parent != probes.resolve():
        raise ValueError(f"{folder}: a repository's probe set is a folder of {probes}, e.g. {probes / name}")
    return folder


def coco_probe_set(
    data: Path,
    kind: str,
    out: Path | None = None,
    per_pair: int = 50,
    seed: int = 0,
    min_count: int = 200,
    name: str | None = None,
    repo: Path | None = None,
) -> ProbeSetEntry:
    """Write a ``kind`` probe set of the COCO-format folder ``data`` to ``out`` and return its entry.
    ``per_pair``: images per pair (systematicity: comb and no_comb each; substitutivity) or per object
    count (productivity). ``repo``: write it into that model repository (by default to
    ``<repo>/probes/<name>``) and list it in the manifest, replacing a set of the same name."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    at_least(1, per_pair=per_pair)
    folder = _destination(out, repo, name or kind)
    data = Path(data)
    ds = load_folder(data)  # FileNotFoundError naming the folder when captions.json is missing
    extra, ids, splits, train_split = SELECTORS[kind](ds, per_pair, seed, min_count)
    cider: CiderD | None = None
    if train_split is not None:
        train = {i: ds.captions[i] for i in train_split.sets["train"]}
        cider = CiderD.from_references(train) if train else None
        extra["training_references"] = (
            f"{train_split.kind} split train set ({len(train)} images, seed {seed})"
        )
    if not ids:
        raise ValueError(f"{data}: no image qualifies for a {kind} probe set")
    scenes = ds.scenes if ds.scenes is not None else instance_scenes(ds, ids)
    content = ProbeContent(
        name=name or kind,
        kind=kind,
        source=str(data.resolve()),
        world_seed=None,
        captions={i: list(ds.captions[i]) for i in ids},
        extra={**extra, "split_seed": seed},
        scenes=scenes if scenes is not None and all(i in scenes for i in ids) else None,
        splits=splits,
        cider=cider,
    )
    if repo is None:
        return write_probe_set(folder, content, _copier(ds))
    from export.probesets.repo import register_probe_sets

    entry = write_probe_set(folder.resolve(), content, _copier(ds), repo=Path(repo).resolve())
    register_probe_sets(Path(repo), [entry])
    return entry


def run_probeset_cli(
    data: Path,
    kind: str,
    out: Path | None,
    per_pair: int = 50,
    seed: int = 0,
    min_count: int = 200,
    name: str | None = None,
    repo: Path | None = None,
) -> dict[str, Any]:
    """What ``compcap probeset`` calls: write the set (into ``repo`` and its manifest when given), print
    and return its manifest entry."""
    entry = coco_probe_set(
        data, kind, out, per_pair=per_pair, seed=seed, min_count=min_count, name=name, repo=repo
    )
    summary = entry.model_dump()
    print(json.dumps(summary, indent=2))
    return summary
