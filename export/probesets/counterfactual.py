"""The counterfactual probe set: minimal pairs of SceneWorld images that differ in exactly one thing.

For each held-out pair of the repository's default captioner (e.g. "black cat", "eat man"), the probe
world (seed ``probe_seed(seed)``, as the other SceneWorld sets) is walked in index order for scenes whose
main object is the only object of the pair's noun and has another colour / size / action, forming a *seen*
pair with the noun (e.g. a white cat; never another held-out pair). The scene is sampled again with that
object edited to the held-out value (``sceneworld.scene.Edit``: same background, layout, other
objects; a size or pose change keeps the object's bottom centre). Both scene graphs are captioned by
the generator and kept only when a reference of each mentions its pair (as Test-Comb images); each
scene is used once, for the least filled pair.

Both images of a pair are rendered with per-object generators (``render(..., object_rng=...)``), so
the background, the noise and every other object are pixel-identical: only the edited object differs.
Image ids: ``2 i`` is the seen image and ``2 i + 1`` the held-out image of probe-world scene ``i``.

``probe.json``'s keys: ``"pairs": [{"kind", "modifier", "noun", "field", "minimal_pairs": [{"held_out":
id, "seen": id, "object": k, "seen_value": v}]}]`` (``field``: colour, size or action; ``object``: the
edited object's id in both scene graphs), ``"per_pair"``, ``"held_out_of"`` (the captioner whose
held-out pairs these are), ``"shortfall"``, ``"scenes_searched"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from export.probesets import COUNTERFACTUAL, probe_seed
from export.probesets.sceneworld import MAX_GRAPHS, ProbeWorld
from export.probesets.write import ProbeContent, write_probe_set
from sceneworld.captions import PERSONS, caption_scene
from sceneworld.dataset import CAPTIONS_PER_IMAGE, GENERATOR
from sceneworld.render import render
from sceneworld.scene import COLOURS, EDIT_ACTIONS_EXCLUDED, SIZES, Edit, EditError, scene_graph
from service.checks import at_least
from service.manifest import ProbeSetEntry
from service.text.concepts import ConceptPair

RENDERER = "per-object generators default_rng([seed, index, 3, object id])"


def pair_field(pair: ConceptPair) -> str:
    """The scene-graph field a pair's modifier is a value of: colour, size or action."""
    if pair.kind == "verb":
        return "action"
    if pair.modifier in COLOURS:
        return "colour"
    if pair.modifier in SIZES:
        return "size"
    raise ValueError(f"{pair.label!r}: {pair.modifier!r} is no colour, size or verb")


def _mentioned(graph: dict[str, Any], pair: ConceptPair) -> bool:
    want = [pair.kind, pair.modifier, pair.noun]
    return any(want in c["pairs"] for c in graph["captions"])


def minimal_pair(
    world_seed: int,
    index: int,
    scene: dict[str, Any],
    pair: ConceptPair,
    held_out: frozenset[ConceptPair],
    image_size: int,
) -> tuple[dict[str, Any], int, str] | None:
    """(held-out graph, object id, seen value) of scene ``index`` (``scene``: its graph, the seen side)
    for ``pair``, or None when the scene has no single object of the noun with another, editable, seen
    value. The held-out graph carries no captions yet."""
    field = pair_field(pair)
    found = [o for o in scene["objects"] if o["noun"] == pair.noun]
    if len(found) != 1:
        return None
    obj = found[0]
    if int(obj["id"]) != int(scene["main"]):  # the scene's main object: what a caption talks about first
        return None
    value = obj[field]
    if value is None or value == pair.modifier or value in EDIT_ACTIONS_EXCLUDED:
        return None
    if field == "colour" and pair.noun in PERSONS:  # a person's colour is its clothes: never said
        return None
    if ConceptPair(pair.kind, str(value), pair.noun) in held_out:
        return None
    edit = Edit(int(obj["id"]), field, pair.modifier, prop_seed=(world_seed, index, 4))
    try:
        edited = scene_graph(np.random.default_rng([world_seed, index, 0]), index, image_size, edit)
    except EditError:
        return None
    return edited, int(obj["id"]), str(value)


def select_counterfactual(
    world: ProbeWorld, pairs: Sequence[ConceptPair], per_pair: int
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], dict[str, int]]:
    """The pair records of ``probe.json``, the scene graph of every image id, and each unfilled pair's
    shortfall."""
    held = frozenset(pairs)
    filled: dict[ConceptPair, list[dict[str, Any]]] = {p: [] for p in pairs}
    graphs: dict[int, dict[str, Any]] = {}
    for index, scene in world.scenes():
        open_ = sorted((p for p in pairs if len(filled[p]) < per_pair), key=lambda p: len(filled[p]))
        if not open_:
            break
        for pair in open_:
            found = minimal_pair(world.seed, index, scene, pair, held, world.image_size)
            if found is None:
                continue
            edited, obj, seen_value = found
            seen = world.captioned(index, dict(scene, captions=[]))
            edited["captions"] = caption_scene(
                edited, np.random.default_rng([world.seed, index, 2]), CAPTIONS_PER_IMAGE
            )
            seen_pair = ConceptPair(pair.kind, seen_value, pair.noun)
            if not (_mentioned(seen, seen_pair) and _mentioned(edited, pair)):
                continue
            seen_id, held_id = 2 * index, 2 * index + 1
            field = pair_field(pair)
            graphs[seen_id] = dict(seen, image_id=seen_id, world_index=index)
            graphs[held_id] = dict(
                edited,
                image_id=held_id,
                world_index=index,
                edit={"object": obj, "field": field, "from": seen_value, "to": pair.modifier},
            )
            filled[pair].append(
                {"held_out": held_id, "seen": seen_id, "object": obj, "seen_value": seen_value}
            )
            break
    records = [
        {
            "kind": p.kind,
            "modifier": p.modifier,
            "noun": p.noun,
            "field": pair_field(p),
            "minimal_pairs": filled[p],
        }
        for p in pairs
    ]
    shortfall = {p.label: per_pair - len(v) for p, v in filled.items() if len(v) < per_pair}
    return records, graphs, shortfall


def counterfactual_probe_set(
    repo: Path,
    seed: int,
    image_size: int,
    held_out: Sequence[ConceptPair],
    per_pair: int,
    held_out_of: str = "",
    max_graphs: int = MAX_GRAPHS,
) -> ProbeSetEntry:
    """Write the counterfactual probe set of a repository trained on world ``seed`` into
    ``<repo>/probes/counterfactual/`` (``per_pair`` minimal pairs per pair of ``held_out``) and return
    its entry."""
    at_least(1, per_pair=per_pair)
    if not held_out:
        raise ValueError("held_out is empty: the default captioner declares no held-out pairs")
    for p in held_out:
        pair_field(p)
    world = ProbeWorld(probe_seed(seed), image_size, max_graphs)
    records, graphs, shortfall = select_counterfactual(world, held_out, per_pair)
    ids = sorted(graphs)
    content = ProbeContent(
        name=COUNTERFACTUAL,
        kind=COUNTERFACTUAL,
        source=world.source(),
        world_seed=world.seed,
        captions={i: [str(c["text"]) for c in graphs[i]["captions"]] for i in ids},
        extra={
            "per_pair": per_pair,
            "held_out_of": held_out_of,
            "pairs": records,
            "shortfall": shortfall,
            "scenes_searched": world.searched,
            "renderer": RENDERER,
        },
        scenes={i: graphs[i] for i in ids},
        info={"generator": GENERATOR, "seed": world.seed, "image_size": image_size, "renderer": RENDERER},
    )
    return write_probe_set(
        Path(repo) / "probes" / COUNTERFACTUAL,
        content,
        _saver(world.seed, graphs, image_size),
        repo=Path(repo),
    )


def render_pair_image(world_seed: int, graph: dict[str, Any], image_size: int) -> np.ndarray:
    """The image of one side of a minimal pair (``graph`` carries its ``world_index``)."""
    index = int(graph["world_index"])
    return render(
        graph,
        np.random.default_rng([world_seed, index, 1]),
        image_size,
        object_rng=lambda k: np.random.default_rng([world_seed, index, 3, k]),
    )


def _saver(world_seed: int, graphs: dict[int, dict[str, Any]], image_size: int) -> Any:
    def save(image_id: int, folder: Path) -> tuple[str, int, int]:
        name = f"images/{image_id:07d}.png"
        image = render_pair_image(world_seed, graphs[image_id], image_size)
        Image.fromarray(image).save(folder / name, compress_level=1)
        return name, image_size, image_size

    return save


__all__ = [
    "counterfactual_probe_set",
    "minimal_pair",
    "pair_field",
    "render_pair_image",
    "select_counterfactual",
]
