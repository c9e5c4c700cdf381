"""The counterfactual probe set (``export.probesets.counterfactual``): a scene edited in exactly one
object's colour, size or action (``sceneworld.scene.Edit``), both sides rendered so that only that
object's pixels differ, deterministic from the seed, written and read back as a probe set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from export.probesets import COUNTERFACTUAL, KINDS, probe_seed
from export.probesets.counterfactual import (
    counterfactual_probe_set,
    pair_field,
    render_pair_image,
    select_counterfactual,
)
from export.probesets.sceneworld import ProbeWorld
from sceneworld.scene import Edit, EditError, scene_graph
from service.probesets import ProbeSetError, load_probe_set
from service.text.concepts import ConceptPair

HELD = [
    ConceptPair("adjective", "black", "cat"),
    ConceptPair("adjective", "small", "plane"),
    ConceptPair("verb", "eat", "man"),
]
DERIVED = {"size": {"bbox"}, "action": {"bbox", "prop"}, "colour": set()}


def _edited(index: int, edit: Edit) -> tuple[dict[str, Any], dict[str, Any]] | None:
    before = scene_graph(np.random.default_rng([5, index, 0]), index, 96)
    try:
        after = scene_graph(np.random.default_rng([5, index, 0]), index, 96, edit)
    except EditError:
        return None
    return before, after


@pytest.mark.parametrize(("field", "value"), [("colour", "black"), ("size", "big"), ("action", "eat")])
def test_an_edit_changes_exactly_one_attribute_of_one_object(field: str, value: str) -> None:
    checked = 0
    for index in range(60):
        graph = scene_graph(np.random.default_rng([5, index, 0]), index, 96)
        obj = graph["objects"][0]
        if obj[field] in (value, None) or obj["layer"] == "rider":
            continue
        found = _edited(index, Edit(0, field, value, prop_seed=(5, index, 4)))
        if found is None:
            continue
        before, after = found
        assert after["objects"][0][field] == value
        assert after["objects"][1:] == before["objects"][1:]  # every other object as it was
        assert {k: v for k, v in after.items() if k not in ("objects", "relations")} == {
            k: v for k, v in before.items() if k not in ("objects", "relations")
        }
        changed = {k for k in obj if after["objects"][0][k] != obj[k]}
        assert field in changed and changed <= {field} | DERIVED[field]
        if field == "colour":
            assert after["relations"] == before["relations"]
        checked += 1
    assert checked >= 5


def test_edits_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="field"):
        Edit(0, "facing", "left")
    with pytest.raises(EditError, match="no object 9"):
        scene_graph(np.random.default_rng([5, 0, 0]), 0, 96, Edit(9, "colour", "red"))
    with pytest.raises(EditError, match="cannot be edited"):
        scene_graph(np.random.default_rng([5, 0, 0]), 0, 96, Edit(0, "action", "ride"))


def test_minimal_pairs_are_deterministic_and_differ_only_in_the_edited_object() -> None:
    def select() -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], dict[str, int]]:
        return select_counterfactual(ProbeWorld(probe_seed(0), 64), HELD, 3)

    records, graphs, shortfall = select()
    assert select() == (records, graphs, shortfall) and shortfall == {}
    for record in records:
        pair = ConceptPair(record["kind"], record["modifier"], record["noun"])
        assert record["field"] == pair_field(pair) and len(record["minimal_pairs"]) == 3
        for m in record["minimal_pairs"]:
            seen, held = graphs[m["seen"]], graphs[m["held_out"]]
            assert m["held_out"] == m["seen"] + 1 and seen["world_index"] == held["world_index"]
            k = m["object"]
            assert seen["objects"][k]["noun"] == held["objects"][k]["noun"] == pair.noun
            assert sum(o["noun"] == pair.noun for o in held["objects"]) == 1 and held["main"] == k
            assert held["objects"][k][record["field"]] == pair.modifier
            assert seen["objects"][k][record["field"]] == m["seen_value"] != pair.modifier
            assert ConceptPair(pair.kind, m["seen_value"], pair.noun) not in HELD
            others = [o for o in held["objects"] if o["id"] != k]
            assert others == [o for o in seen["objects"] if o["id"] != k]
            assert held["edit"] == {
                "object": k,
                "field": record["field"],
                "from": m["seen_value"],
                "to": pair.modifier,
            }
            a = render_pair_image(probe_seed(0), seen, 64)
            b = render_pair_image(probe_seed(0), held, 64)
            assert (render_pair_image(probe_seed(0), held, 64) == b).all()  # deterministic
            differs = np.any(a != b, axis=-1)
            assert differs.any()
            x0 = min(seen["objects"][k]["bbox"][0], held["objects"][k]["bbox"][0])
            y0 = min(seen["objects"][k]["bbox"][1], held["objects"][k]["bbox"][1])
            x1 = max(seen["objects"][k]["bbox"][2], held["objects"][k]["bbox"][2])
            y1 = max(seen["objects"][k]["bbox"][3], held["objects"][k]["bbox"][3])
            outside = np.ones_like(differs)
            outside[max(0, y0 - 2) : y1 + 2, max(0, x0 - 2) : x1 + 2] = False
            assert not differs[outside].any()  # nothing outside the edited object changes


def test_the_set_is_written_and_read_back(tmp_path: Path) -> None:
    assert COUNTERFACTUAL not in KINDS  # a build does not write it
    entry = counterfactual_probe_set(tmp_path, 0, 64, HELD, 2, held_out_of="butr")
    assert (entry.name, entry.kind, entry.images, entry.scene_graphs) == (COUNTERFACTUAL,) * 2 + (12, True)
    probe = load_probe_set(tmp_path / entry.path)
    pairs = probe.minimal_pairs()
    assert [p.pair for p in pairs] == HELD and all(len(p.minimal_pairs) == 2 for p in pairs)
    assert probe.info["held_out_of"] == "butr" and probe.scenes is not None
    m = pairs[0].minimal_pairs[0]
    assert pairs[0].seen_pair(m) == ConceptPair("adjective", m.seen_value, "cat")
    assert probe.images([m.seen, m.held_out], 64, 64).shape == (2, 64, 64, 3)
    with pytest.raises(ProbeSetError, match="not systematicity"):
        probe.pairs()
    info = json.loads((tmp_path / entry.path / "probe.json").read_text())
    info["pairs"][0]["minimal_pairs"][0]["held_out"] = 99_999_999
    (tmp_path / entry.path / "probe.json").write_text(json.dumps(info))
    with pytest.raises(ProbeSetError, match="minimal_pairs"):
        load_probe_set(tmp_path / entry.path)
    with pytest.raises(ValueError, match="per_pair"):
        counterfactual_probe_set(tmp_path, 0, 64, HELD, 0)
