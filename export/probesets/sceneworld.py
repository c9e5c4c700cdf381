"""Probe sets from a SceneWorld world of their own (seed ``probe_seed(seed)``, see ``__init__``).

Scene graphs are generated without rendering (0.5 ms each; captions, another 0.7 ms, only for scenes
that could fill an open slot) and images are chosen from them by rejection sampling, walking the
world's image indices in order; only the chosen images are rendered. An image id is its index in the
probe world, so ``generate_one(id, world_seed)`` gives it back. Within a set every image is used once:

* systematicity — per pair of the four groups, ``per_pair`` comb images (the pair is in the scene and
  at least one reference caption carries it, by the generator's record of the pairs each caption
  mentions) and ``per_pair`` no_comb images (both constituents in the scene, no object carries the pair,
  no reference mentions it, and no reference mentions any pair of the same group);
* productivity — ``per_bucket`` images per object count 1..4, also bucketed by reference length;
* substitutivity — per candidate (category, fine) pair whose category is a SceneWorld noun,
  ``per_pair`` images whose scene holds the category.

An image that qualifies for several slots goes to the least filled one (ties: first in pair order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from export.data.splits import Split
from export.probesets import KINDS, probe_seed
from export.probesets.tables import (
    length_terciles,
    pair_record,
    scene_carries,
    substitution_table,
    systematicity_splits,
)
from export.probesets.write import ProbeContent, write_probe_set
from sceneworld.captions import caption_scene
from sceneworld.dataset import CAPTIONS_PER_IMAGE, GENERATOR, generate_one
from sceneworld.scene import scene_graph
from service.evaluation.cider import CiderD
from service.manifest import ProbeSetEntry
from service.text.concepts import ConceptPair, load_concepts
from service.text.synonyms import candidate_table

MAX_GRAPHS = 400_000  # give up on a slot after this many scenes (records a shortfall)


class ProbeWorld:
    """The probe world walked in index order. ``scenes()`` yields scene graphs without captions (half
    the cost of a captioned graph); ``captioned`` adds an image's captions — the same as
    ``generate_graphs`` gives, both come from ``default_rng([seed, index, 0 | 2])``. Chosen images are
    kept (``keep``) so that writing them does not generate them again."""

    def __init__(self, seed: int, image_size: int, max_graphs: int = MAX_GRAPHS) -> None:
        self.seed, self.image_size, self.max_graphs = seed, image_size, max_graphs
        self.kept: dict[int, dict[str, Any]] = {}
        self.searched = 0  # scenes looked at by the longest walk

    def scenes(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for index in range(self.max_graphs):
            self.searched = max(self.searched, index + 1)
            scene = self.kept.get(index)
            yield index, scene if scene is not None else self._scene(index)

    def _scene(self, index: int) -> dict[str, Any]:
        return scene_graph(np.random.default_rng([self.seed, index, 0]), index, self.image_size)

    def captioned(self, index: int, scene: dict[str, Any]) -> dict[str, Any]:
        if not scene.get("captions"):  # scene_graph leaves an empty list
            rng = np.random.default_rng([self.seed, index, 2])
            scene["captions"] = caption_scene(scene, rng, CAPTIONS_PER_IMAGE)
        return scene

    def keep(self, index: int, scene: dict[str, Any]) -> None:
        self.kept[index] = self.captioned(index, scene)

    def graph(self, index: int) -> dict[str, Any]:
        """The captioned scene graph of image ``index``."""
        if index not in self.kept:
            self.keep(index, self._scene(index))
        return self.kept[index]

    def source(self) -> str:
        return f"sceneworld(seed={self.seed})"


def _least_filled(candidates: list[Any], filled: dict[Any, list[int]], target: int) -> Any | None:
    open_ = [c for c in candidates if len(filled[c]) < target]
    return min(open_, key=lambda c: len(filled[c])) if open_ else None


def _mentions(graph: dict[str, Any]) -> dict[ConceptPair, int]:
    out: dict[ConceptPair, int] = {}
    for caption in graph["captions"]:
        for p in {ConceptPair(*p) for p in caption["pairs"]}:
            out[p] = out.get(p, 0) + 1
    return out


def _atoms(graph: dict[str, Any]) -> set[str]:
    return {a for o in graph["objects"] for a in (o["noun"], o["colour"], o["size"], o["action"]) if a}


def select_systematicity(world: ProbeWorld, per_pair: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``pairs`` records of all 24 pairs and the shortfall of each unfilled slot. Scenes are captioned
    only when the scene alone qualifies them for an open slot."""
    groups = load_concepts().pair_groups
    group_of = {p: g for g, pairs in enumerate(groups, 1) for p in pairs}
    filled: dict[Any, list[int]] = {(p, part): [] for p in group_of for part in ("comb", "no_comb")}
    for index, scene in world.scenes():
        atoms = _atoms(scene)
        open_ = [s for s, ids in filled.items() if len(ids) < per_pair]
        if not open_:
            break
        maybe = [
            (p, part)
            for p, part in open_
            if scene_carries(scene, p) == (part == "comb") and p.modifier in atoms and p.noun in atoms
        ]
        if not maybe:
            continue
        mentioned = _mentions(world.captioned(index, scene))
        busy_groups = {group_of[p] for p in mentioned if p in group_of}
        candidates = [
            (p, part)
            for p, part in maybe
            if (
                mentioned.get(p, 0) > 0
                if part == "comb"
                else p not in mentioned and group_of[p] not in busy_groups
            )
        ]
        slot = _least_filled(candidates, filled, per_pair)
        if slot is not None:
            filled[slot].append(index)
            world.keep(index, scene)
    records = [pair_record(p, group_of[p], filled[(p, "comb")], filled[(p, "no_comb")]) for p in group_of]
    shortfall = {
        f"{p.label}/{part}": per_pair - len(v) for (p, part), v in filled.items() if len(v) < per_pair
    }
    return records, shortfall


def select_productivity(world: ProbeWorld, per_bucket: int) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Image ids per object count "1".."4" ("4": four or more) and the shortfall."""
    buckets: dict[str, list[int]] = {k: [] for k in ("1", "2", "3", "4")}
    for index, scene in world.scenes():
        key = str(min(max(len(scene["objects"]), 1), 4))
        if len(buckets[key]) < per_bucket:
            buckets[key].append(index)
            world.keep(index, scene)
        if all(len(v) >= per_bucket for v in buckets.values()):
            break
    return buckets, {k: per_bucket - len(v) for k, v in buckets.items() if len(v) < per_bucket}


def substitution_candidates() -> list[tuple[str, str]]:
    """Candidate (category, fine) pairs whose category is a SceneWorld noun."""
    nouns = load_concepts().nouns
    return [(c, f) for c, f in candidate_table(load_concepts()) if c in nouns]


def select_substitutivity(
    world: ProbeWorld, per_pair: int
) -> tuple[dict[tuple[str, str], list[int]], dict[str, int]]:
    pairs = substitution_candidates()
    filled: dict[Any, list[int]] = {p: [] for p in pairs}
    for index, scene in world.scenes():
        nouns = {o["noun"] for o in scene["objects"]}
        slot = _least_filled([p for p in pairs if p[0] in nouns], filled, per_pair)
        if slot is not None:
            filled[slot].append(index)
            world.keep(index, scene)
        if all(len(v) >= per_pair for v in filled.values()):
            break
    return filled, {f"{c}<->{f}": per_pair - len(v) for (c, f), v in filled.items() if len(v) < per_pair}


@dataclass(frozen=True)
class Sizes:
    """What every selector may read: images per pair / per bucket, the training captions (synonym
    counts) and the substitution table's ``min_count``."""

    per_pair: int
    per_bucket: int
    train_captions: list[str]
    min_count: int


# (world, sizes) -> the chosen image ids, the kind-specific keys of probe.json, the splits to write
Selector = Callable[[ProbeWorld, Sizes], tuple[list[int], dict[str, Any], list[Split]]]


def _systematicity(world: ProbeWorld, sizes: Sizes) -> tuple[list[int], dict[str, Any], list[Split]]:
    per_pair = sizes.per_pair
    records, shortfall = select_systematicity(world, per_pair)
    ids = sorted({i for r in records for part in ("comb", "no_comb") for i in r[part]})
    info = {"source": world.source(), "world_seed": world.seed, "presence": "scene_graph"}
    splits = systematicity_splits(records, {i: _mentions(world.graph(i)) for i in ids}, info)
    return ids, {"per_pair": per_pair, "pairs": records, "shortfall": shortfall}, splits


def _productivity(world: ProbeWorld, sizes: Sizes) -> tuple[list[int], dict[str, Any], list[Split]]:
    per_bucket = sizes.per_bucket
    density, shortfall = select_productivity(world, per_bucket)
    ids = sorted(i for v in density.values() for i in v)
    length, edges = length_terciles({i: _texts(world.graph(i)) for i in ids})
    objects = {str(i): [o["noun"] for o in world.graph(i)["objects"]] for i in ids}
    extra = {"per_bucket": per_bucket, "objects": objects, "density": density, "length": length}
    return ids, extra | {"length_edges": edges, "shortfall": shortfall}, []


def _substitutivity(world: ProbeWorld, sizes: Sizes) -> tuple[list[int], dict[str, Any], list[Split]]:
    per_pair, min_count = sizes.per_pair, sizes.min_count
    chosen, shortfall = select_substitutivity(world, per_pair)
    ids = sorted(i for v in chosen.values() for i in v)
    table, counts = substitution_table(sizes.train_captions, min_count)
    extra = {
        "per_pair": per_pair,
        "pairs": [{"category": c, "fine": f, "images": v} for (c, f), v in chosen.items()],
        "substitutions": [list(p) for p in table],
        "min_count": min_count,
        "synonym_counts": counts,
        "shortfall": shortfall,
    }
    return ids, extra, []


# format name -> its selector and whether its sets keep the training references' CIDEr-D frequencies
SELECTORS: dict[str, tuple[Selector, bool]] = {
    "systematicity": (_systematicity, False),
    "productivity": (_productivity, True),
    "substitutivity": (_substitutivity, True),
}


def sceneworld_probe_sets(
    repo: Path,
    train_references: Sequence[Sequence[str]],
    seed: int,
    image_size: int,
    per_pair: int = 50,
    per_bucket: int = 50,
    min_count: int = 200,
    kinds: Sequence[str] = KINDS,
    references: str = "",
    max_graphs: int = MAX_GRAPHS,
    on_kind: Callable[[str], object] | None = None,
) -> list[ProbeSetEntry]:
    """Write the SceneWorld probe sets of a repository trained on world ``seed`` into
    ``<repo>/probes/<kind>/`` and return their manifest entries. ``train_references``: the references of
    each training image (CIDEr-D document frequencies, synonym counts); ``references`` says which
    images they are (recorded in probe.json). ``on_kind(kind)`` is called as each kind starts."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"kinds must be among {KINDS}, got {unknown}")
    world = ProbeWorld(probe_seed(seed), image_size, max_graphs)
    cider = CiderD.from_references(train_references) if train_references else None
    sizes = Sizes(per_pair, per_bucket, [c for refs in train_references for c in refs], min_count)
    entries = []
    for kind in kinds:
        if on_kind is not None:
            on_kind(kind)
        world.searched = 0
        select, keeps_cider = SELECTORS[kind]
        ids, extra, splits = select(world, sizes)
        extra |= {"scenes_searched": world.searched, "training_references": references}
        content = ProbeContent(
            name=kind,
            kind=kind,
            source=world.source(),
            world_seed=world.seed,
            captions={i: _texts(world.graph(i)) for i in ids},
            extra=extra,
            scenes={i: world.graph(i) for i in ids},
            splits=splits,
            cider=cider if keeps_cider else None,
            info={"generator": GENERATOR, "seed": world.seed, "image_size": image_size},
        )
        folder = Path(repo) / "probes" / kind
        entries.append(write_probe_set(folder, content, _renderer(world), repo=Path(repo)))
    return entries


def _texts(graph: dict[str, Any]) -> list[str]:
    return [str(c["text"]) for c in graph["captions"]]


def _renderer(world: ProbeWorld) -> Any:
    def save(image_id: int, folder: Path) -> tuple[str, int, int]:
        image, _, _ = generate_one(image_id, world.seed, world.image_size)
        name = f"images/{image_id:06d}.png"
        Image.fromarray(image).save(folder / name, compress_level=1)
        return name, world.image_size, world.image_size

    return save
