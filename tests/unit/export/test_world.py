"""SceneWorld: determinism, rendering, caption/scene-graph agreement, omission rate, pair coverage,
size ordering, dataset round trip and cell labels."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sceneworld.dataset import generate, generate_graphs, load_dataset, write_dataset
from sceneworld.labels import ACTION_LABELS, COLOUR_LABELS, NOUN_LABELS, SIZE_LABELS, cell_labels
from service.text.concepts import load_concepts
from service.text.vocabulary import tokenize

C = load_concepts()
PERSONS = {n for n, v in C.nouns.items() if v["kind"] == "person"}
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4}


@lru_cache(maxsize=1)
def lexicon() -> dict[str, dict[str, str]]:
    """Surface word -> canonical concept, built from concepts.json independently of the generator."""
    nouns, plurals, colours, sizes, verbs = {}, {}, {}, {}, {}
    for noun, v in C.nouns.items():
        for word in v["synonyms"]:
            nouns[word] = noun
            nouns[v["plural"][word]] = noun
            plurals[v["plural"][word]] = noun
    for colour, v in C.colours.items():
        for word in v["synonyms"]:
            colours[word] = colour
    for size, v in C.sizes.items():
        for word in v["synonyms"]:
            sizes[word] = size
    for verb, v in C.verbs.items():
        for word in v["ing"].values():
            verbs[word] = verb
    return {"noun": nouns, "plural": plurals, "colour": colours, "size": sizes, "verb": verbs}


def parse_pairs(text: str) -> list[tuple[str, str, str]]:
    """The pairs a dependency parse would find in the grammar's sentences: adjectives right before a
    noun; a verb attached to the nearest concept noun before it."""
    lex = lexicon()
    toks = tokenize(text)
    pairs = []
    last_noun = None
    for i, tok in enumerate(toks):
        if tok in lex["noun"]:
            noun = lex["noun"][tok]
            j = i - 1
            while j >= 0 and (toks[j] in lex["colour"] or toks[j] in lex["size"]):
                adj = lex["colour"].get(toks[j]) or lex["size"][toks[j]]
                pairs.append(("adjective", adj, noun))
                j -= 1
            last_noun = noun
        elif tok in lex["verb"]:
            assert last_noun is not None, f"verb without a subject noun: {text!r}"
            pairs.append(("verb", lex["verb"][tok], last_noun))
    return pairs


@pytest.fixture(scope="module")
def graphs() -> list[dict[str, Any]]:
    return generate_graphs(2500, seed=11)


def test_determinism_and_prefixes() -> None:
    a_img, a_cap, a_g = generate(6, seed=3)
    b_img, b_cap, b_g = generate(6, seed=3)
    assert np.array_equal(a_img, b_img) and a_cap == b_cap and a_g == b_g
    c_img, c_cap, _ = generate(6, seed=4)
    assert not np.array_equal(a_img, c_img) and a_cap != c_cap
    # image i depends only on (seed, i)
    d_img, d_cap, d_g = generate(3, seed=3, start=2)
    assert np.array_equal(d_img, a_img[2:5]) and d_cap == a_cap[2:5] and d_g == a_g[2:5]
    # graphs without rendering are the same graphs
    assert generate_graphs(6, seed=3) == a_g


def test_image_shape_and_content() -> None:
    images, captions, graphs_ = generate(8, seed=1)
    assert images.shape == (8, 96, 96, 3) and images.dtype == np.uint8
    assert len(captions) == 8 and all(len(c) == 5 for c in captions)
    assert all(g["captions"][k]["text"] == captions[i][k] for i, g in enumerate(graphs_) for k in range(5))
    # noisy, varied images: many distinct colours, images differ from each other
    assert all(len(np.unique(im.reshape(-1, 3), axis=0)) > 500 for im in images)
    assert float(np.abs(images[0].astype(int) - images[1].astype(int)).mean()) > 10
    # objects are drawn: pixels inside an object's box differ from the background outside boxes
    small, _, g_small = generate(4, seed=1, image_size=64)
    assert small.shape == (4, 64, 64, 3)
    assert [g["objects"][0]["noun"] for g in g_small] == [g["objects"][0]["noun"] for g in graphs_[:4]]


def test_object_colour_is_visible() -> None:
    """The mean colour inside big non-person objects' boxes is nearer their colour than most colours."""
    images, _, gs = generate(60, seed=2)
    ranks = []
    names = list(C.colours)
    rgbs = np.array([C.colours[c]["rgb"] for c in names], dtype=float)
    for im, g in zip(images, gs, strict=True):
        for o in g["objects"]:
            x0, y0, x1, y1 = o["bbox"]
            if o["noun"] in PERSONS or (x1 - x0) * (y1 - y0) < 300:
                continue
            patch = im[y0:y1, x0:x1].reshape(-1, 3).astype(float)
            d = np.linalg.norm(patch[:, None, :] - rgbs[None], axis=2)
            votes = Counter(int(k) for k in d.argmin(axis=1))
            ranks.append([k for k, _ in votes.most_common()].index(names.index(o["colour"])))
    assert len(ranks) > 20
    assert np.mean(np.array(ranks) <= 1) > 0.85


def test_captions_agree_with_scene_graph(graphs: list[dict[str, Any]]) -> None:
    lex = lexicon()
    checked = 0
    for g in graphs[:600]:
        objs = g["objects"]
        assert 1 <= len(objs) <= 4
        nouns = Counter(o["noun"] for o in objs)
        assert len(g["captions"]) == 5
        for cap in g["captions"]:
            text = cap["text"]
            toks = tokenize(text)
            assert 5 <= len(toks) <= 16, text
            for i, tok in enumerate(toks):
                if tok in lex["noun"]:
                    assert lex["noun"][tok] in nouns, (text, objs)
                if tok in lex["colour"]:
                    assert any(o["colour"] == lex["colour"][tok] for o in objs), (text, objs)
                if tok in lex["size"]:
                    assert any(o["size"] == lex["size"][tok] for o in objs), (text, objs)
                if tok in lex["verb"]:
                    assert any(o["action"] == lex["verb"][tok] for o in objs), (text, objs)
                if tok in NUMBER_WORDS:
                    nxt = next(t for t in toks[i + 1 :] if t in lex["noun"])
                    assert nxt in lex["plural"] and nouns[lex["plural"][nxt]] >= NUMBER_WORDS[tok], text
            recorded = sorted(tuple(p) for p in cap["pairs"])
            assert recorded == sorted(parse_pairs(text)), (text, recorded)
            for kind, mod, noun in recorded:
                if kind == "verb":
                    assert any(o["noun"] == noun and o["action"] == mod for o in objs), (text, objs)
                else:
                    assert noun not in PERSONS or mod in C.sizes, text
                    assert any(o["noun"] == noun and mod in (o["colour"], o["size"]) for o in objs), text
            checked += 1
        assert len({c["text"] for c in g["captions"]}) >= 4
    assert checked == 3000


def test_scene_graph_consistency(graphs: list[dict[str, Any]]) -> None:
    for g in graphs[:500]:
        assert g["background"] in C.backgrounds
        for o in g["objects"]:
            x0, y0, x1, y1 = o["bbox"]
            assert 0 <= x0 < x1 <= 96 and 0 <= y0 < y1 <= 96
            assert o["colour"] in C.colours and o["size"] in C.sizes
            if o["action"] is not None:
                assert o["noun"] in C.verbs[o["action"]]["agents"]
            elif C.nouns[o["noun"]]["animate"]:
                assert o["noun"] == "horse"  # only a ridden horse has no action
            if o["noun"] == "boat":
                assert g["background"] in ("water", "sand")
            if o["action"] == "fly":
                assert y1 <= g["horizon"] + 0.2 * 96
        for r in g["relations"]:
            if r["predicate"] == "on":
                rider, horse = g["objects"][r["subject"]], g["objects"][r["object"]]
                assert rider["action"] == "ride" and horse["noun"] == "horse"
        riders = [o for o in g["objects"] if o["action"] == "ride"]
        assert len(riders) == sum(r["predicate"] == "on" for r in g["relations"])


def test_omission_rate(graphs: list[dict[str, Any]]) -> None:
    mentions: list[int] = []
    main_mentions = []
    lex = lexicon()
    for g in graphs[:400]:
        present = set()
        for o in g["objects"]:
            if o["noun"] not in PERSONS:
                present.add(("adjective", o["colour"], o["noun"]))
            present.add(("adjective", o["size"], o["noun"]))
            if o["action"]:
                present.add(("verb", o["action"], o["noun"]))
        for p in present:
            mentions.append(sum(list(p) in c["pairs"] for c in g["captions"]))
        main = g["objects"][g["main"]]["noun"]
        main_mentions.append(
            sum(any(lex["noun"].get(t) == main for t in tokenize(c["text"])) for c in g["captions"])
        )
    rate = float(np.mean(mentions))
    assert 1.0 <= rate <= 2.2, rate
    assert 0.05 < np.mean(np.array(mentions) == 0) < 0.35  # some present pairs are never mentioned
    assert max(mentions) <= 5
    assert np.mean(main_mentions) >= 4.0


def test_every_held_out_pair_occurs(graphs: list[dict[str, Any]]) -> None:
    present: Counter[tuple[str, str, str]] = Counter()
    mentioned: Counter[tuple[str, str, str]] = Counter()
    for g in graphs:
        seen = set()
        for o in g["objects"]:
            seen |= {("adjective", o["colour"], o["noun"]), ("adjective", o["size"], o["noun"])}
            if o["action"]:
                seen.add(("verb", o["action"], o["noun"]))
        present.update(seen)
        mentioned.update(tuple(p) for c in g["captions"] for p in c["pairs"])
    for group in C.pair_groups:
        for pair in group:
            key = (pair.kind, pair.modifier, pair.noun)
            assert present[key] >= 8, (key, present[key])
            assert mentioned[key] >= 8, (key, mentioned[key])


def test_size_ordering(graphs: list[dict[str, Any]]) -> None:
    heights: dict[tuple[str, str], list[int]] = {}
    extents: dict[tuple[str, str], list[int]] = {}
    for g in graphs:
        for o in g["objects"]:
            x0, y0, x1, y1 = o["bbox"]
            heights.setdefault((o["noun"], o["size"]), []).append(y1 - y0)
            extents.setdefault((o["noun"], o["size"]), []).append(max(x1 - x0, y1 - y0))
    # a big cat is still smaller than a small bus
    assert max(heights[("cat", "big")]) < min(heights[("bus", "small")])
    assert max(extents[("cat", "big")]) < min(extents[("bus", "small")])
    assert max(extents[("bird", "big")]) < min(extents[("plane", "small")])
    for noun in C.nouns:
        assert np.median(extents[(noun, "big")]) > 1.6 * np.median(extents[(noun, "small")]), noun


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    summary = write_dataset(tmp_path / "ds", images=20, seed=7, progress=False)
    assert summary["images"] == 20 and summary["captions"] == 100
    assert summary["images_per_s"] > 0 and 0.5 < summary["mean_mentions_per_present_pair"] < 3
    images, captions, graphs_, ids = load_dataset(tmp_path / "ds")
    ref_images, ref_captions, ref_graphs = generate(20, seed=7)
    assert ids == list(range(20))
    assert np.array_equal(images, ref_images)
    assert captions == ref_captions and graphs_ == ref_graphs
    import json

    coco = json.loads((tmp_path / "ds" / "captions.json").read_text())
    assert coco["info"]["seed"] == 7 and coco["images"][3]["file_name"] == "images/000003.png"
    assert {a["image_id"] for a in coco["annotations"]} == set(range(20))
    assert "pairs" not in json.dumps(coco)


def test_cell_labels() -> None:
    graph = {
        "objects": [
            {"noun": "bus", "colour": "red", "size": "big", "action": None, "bbox": [0, 48, 96, 96]},
            {"noun": "cat", "colour": "black", "size": "small", "action": "sit", "bbox": [0, 0, 48, 96]},
        ]
    }
    lab = cell_labels(graph, grid=4, image_size=96)
    assert set(lab) == {"noun", "colour", "size", "action"}
    assert all(v.shape == (4, 4) and v.dtype == np.int64 for v in lab.values())
    cat, bus = NOUN_LABELS.index("cat"), NOUN_LABELS.index("bus")
    assert NOUN_LABELS[0] == COLOUR_LABELS[0] == SIZE_LABELS[0] == ACTION_LABELS[0] == "none"
    expected = np.array([[cat, cat, 0, 0]] * 2 + [[cat, cat, bus, bus]] * 2)
    assert np.array_equal(lab["noun"], expected)
    assert lab["colour"][3, 0] == COLOUR_LABELS.index("black") and lab["colour"][3, 3] == COLOUR_LABELS.index(
        "red"
    )
    assert lab["action"][3, 3] == 0 and lab["action"][0, 0] == ACTION_LABELS.index("sit")
    assert lab["size"][0, 3] == 0 and lab["size"][2, 2] == SIZE_LABELS.index("big")
    # real graphs: labels in range, object cells present
    _, _, gs = generate(5, seed=0)
    for g in gs:
        lab = cell_labels(g, grid=6, image_size=96)
        assert lab["noun"].max() < len(NOUN_LABELS) and lab["action"].max() < len(ACTION_LABELS)
        assert (lab["noun"] > 0).any() or all((o["bbox"][2] - o["bbox"][0]) < 16 for o in g["objects"])
