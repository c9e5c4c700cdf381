"""The counterfactual hard negatives (``compcap_lab.training.compositional``): every caption negative and
every counterfactual image differs from its positive in exactly one attribute, and the leak filter keeps
every held-out pair of the group out of them."""

from __future__ import annotations

import numpy as np
import pytest

from compcap_lab.training.compositional import (
    CaptionNegative,
    Counterfactuals,
    ImageNegative,
    attached_modifiers,
    caption_negatives,
    drop_leaks,
    hard_negatives,
    image_negatives,
    pair_of,
    render_negatives,
    shown_pairs,
)
from sceneworld.dataset import generate_graphs
from sceneworld.scene import Edit
from service.text.concepts import ConceptPair, load_concepts
from service.text.vocabulary import Vocabulary, tokenize
from tests.unit.lab_compositional.scenes import SIZE, WORLD_SEED, World, grid_regions, mentioned, recorded

GROUP_1 = frozenset(load_concepts().group(1))  # black cat, big bird, red bus, small plane, eat man, lie woman
BLACK_CAT = ConceptPair("adjective", "black", "cat")
EAT_MAN = ConceptPair("verb", "eat", "man")


def attached(words: tuple[str, ...] | list[str]) -> frozenset[ConceptPair]:
    return frozenset(m.pair for m in attached_modifiers(words))


def test_the_grammar_reading_is_what_the_scene_graphs_record() -> None:
    for graph in generate_graphs(300, 5, SIZE):
        for caption in graph["captions"]:
            assert attached(tokenize(caption["text"])) == recorded(caption), caption["text"]
    assert attached(tokenize("a man in a red shirt sitting next to a big black dog")) == {
        ConceptPair("verb", "sit", "man"),
        ConceptPair("adjective", "big", "dog"),
        ConceptPair("adjective", "black", "dog"),
    }


def test_caption_negatives_differ_from_their_caption_in_exactly_one_attribute(world: World) -> None:
    kinds = {1: 0, 2: 0}
    for graph in world.graphs:
        shown = set(shown_pairs(graph))
        for caption in graph["captions"]:
            words = tokenize(caption["text"])
            before = {m.position: m for m in attached_modifiers(words)}
            for negative in caption_negatives(words, recorded(caption), shown):
                changed = tuple(
                    k for k, (a, b) in enumerate(zip(words, negative.words, strict=True)) if a != b
                )
                assert changed == negative.positions and len(changed) in kinds
                after = {m.position: m for m in attached_modifiers(negative.words)}
                assert after.keys() == before.keys()  # the same reading: same nouns, same attributes
                for k, m in before.items():
                    assert (after[k].noun, after[k].field) == (m.noun, m.field)
                    assert (after[k].value != m.value) == (k in changed)
                assert {before[k].field for k in changed} == {negative.field}
                if len(changed) == 2:  # a swap: the two values trade places, on two nouns
                    a, b = changed
                    assert (after[a].value, after[b].value) == (before[b].value, before[a].value)
                    assert before[a].noun != before[b].noun
                assert not attached(negative.words) <= shown  # false of the image
                kinds[len(changed)] += 1
    assert kinds[1] > 100 and kinds[2] > 0, kinds


def test_image_negatives_change_one_attribute_of_one_object(world: World) -> None:
    fields = set()
    for graph in world.graphs:
        for negative in image_negatives(graph, mentioned(graph), WORLD_SEED, SIZE):
            edited, name, k = negative.graph, negative.edit.field, negative.edit.index
            assert {key: edited[key] for key in ("background", "horizon", "main")} == {
                key: graph[key] for key in ("background", "horizon", "main")
            }
            assert len(edited["objects"]) == len(graph["objects"])
            for before, after in zip(graph["objects"], edited["objects"], strict=True):
                if before["id"] != k:
                    assert after == before
                    continue
                assert before[name] == negative.old != after[name] == negative.edit.value
                assert all(after[f] == before[f] for f in ("noun", "colour", "size", "action") if f != name)
                if name == "colour":  # nothing else follows from a colour: same box, same prop
                    assert after == dict(before, colour=negative.edit.value)
                pair = pair_of(name, negative.old, before["noun"])
                assert pair in mentioned(graph) and shown_pairs(graph)[pair] == 1
            fields.add(name)
    assert fields == {"colour", "size", "action"}


def test_a_colour_negative_repaints_only_its_object(world: World) -> None:
    """Rendered as the world rendered the training image: outside the edited object's box (and a few
    pixels of outline) the images are the same to the pixel."""
    negatives = [
        n
        for graph in world.graphs
        for n in image_negatives(graph, mentioned(graph), WORLD_SEED, SIZE)
        if n.edit.field == "colour"
    ][:12]
    assert len(negatives) == 12
    for negative, image in zip(negatives, render_negatives(negatives, WORLD_SEED, SIZE), strict=True):
        training = world.images[negative.index]
        x0, y0, x1, y1 = negative.graph["objects"][negative.edit.index]["bbox"]
        outside = np.ones((SIZE, SIZE), dtype=bool)
        outside[max(0, y0 - 6) : y1 + 6, max(0, x0 - 6) : x1 + 6] = False
        assert (image[outside] == training[outside]).all()
        assert (image != training).any()


def _cat(colour: str) -> dict[str, object]:
    return {"id": 0, "noun": "cat", "colour": colour, "size": "small", "action": "sit"}


def test_the_leak_filter_drops_what_shows_or_mentions_a_held_out_pair() -> None:
    leaking_image = ImageNegative(0, Edit(0, "colour", "black"), "white", {"objects": [_cat("black")]})
    kept_image = ImageNegative(0, Edit(0, "colour", "white"), "black", {"objects": [_cat("white")]})
    man = {
        "id": 1,
        "noun": "man",
        "colour": "black",
        "size": "big",
        "action": "eat",
    }  # eat man, in another object
    leaking_too = ImageNegative(0, Edit(0, "colour", "gray"), "white", {"objects": [_cat("gray"), man]})
    texts = [
        "a black cat sitting on the grass",  # mentions black cat
        "a big black cat",  # through another adjective
        "a man eating a banana next to a dog",  # eat man
        "a black dog next to a cat",  # both words, not attached: kept
        "a white cat lying on the floor",
    ]
    captions = [CaptionNegative(tuple(t.split()), "colour", (1,)) for t in texts]
    images, words = drop_leaks([leaking_image, kept_image, leaking_too], captions, GROUP_1)
    assert images == [kept_image]
    assert words == captions[3:]
    assert drop_leaks([leaking_image], captions, frozenset()) == ([leaking_image], captions)


def test_the_leak_filter_clears_the_negatives_of_scenes_that_would_leak() -> None:
    """Scenes with a cat of another colour and a man doing something else, their colour and action
    mentioned: their proposals include "black cat" / "eat man" ones, which the filter drops, and only
    those."""
    graphs = generate_graphs(400, WORLD_SEED, SIZE)
    found = {BLACK_CAT: 0, EAT_MAN: 0}
    for graph in graphs:
        if shown_pairs(graph).keys() & GROUP_1:
            continue
        shown = set(shown_pairs(graph))
        images = image_negatives(graph, mentioned(graph), WORLD_SEED, SIZE)
        captions = [
            n for c in graph["captions"] for n in caption_negatives(tokenize(c["text"]), recorded(c), shown)
        ]
        kept_images, kept_captions = drop_leaks(images, captions, GROUP_1)
        assert kept_images == [n for n in images if not shown_pairs(n.graph).keys() & GROUP_1]
        assert kept_captions == [n for n in captions if not attached(n.words) & GROUP_1]
        for pair in found:
            leaked = [n for n in images if pair in shown_pairs(n.graph)]
            leaked_words = [n for n in captions if pair in attached(n.words)]
            found[pair] += len(leaked) + len(leaked_words)
            assert not set(leaked) & set(kept_images) and not set(leaked_words) & set(kept_captions)
    assert min(found.values()) > 0, found  # the world did propose leaking negatives


def test_hard_negatives_of_a_training_set_leak_nothing_and_index_every_pair(world: World) -> None:
    vocab = Vocabulary.build(c for caps in world.captions for c in caps)
    store = Counterfactuals(grid_regions, WORLD_SEED, SIZE)
    clean = [k for k, g in enumerate(world.graphs) if not mentioned(g) & GROUP_1]
    graphs, captions = [world.graphs[k] for k in clean], [world.captions[k] for k in clean]
    negatives = hard_negatives(graphs, captions, GROUP_1, store, vocab, 16, seed=0, per_image=2)
    pairs = sum(len(c) for c in captions)
    assert negatives.pairs == pairs and negatives.image_start[-1] == len(negatives.image_rows)
    assert negatives.caption_start[-1] == len(negatives.caption_tokens) == len(negatives.caption_lengths)
    assert (np.diff(negatives.image_start) >= 0).all() and (np.diff(negatives.caption_start) >= 0).all()
    assert negatives.image_regions.shape == (len(store.rows), 36, 3) and len(store.rows) <= 2 * len(clean)
    assert set(negatives.image_rows) == set(range(len(store.rows)))  # each rendered image serves a caption
    proposed = {n.key: n for g in graphs for n in image_negatives(g, mentioned(g), WORLD_SEED, SIZE)}
    assert not any(shown_pairs(proposed[key].graph).keys() & GROUP_1 for key in store.rows)
    texts = [vocab.decode(row[1:].tolist()) for row in negatives.caption_tokens]
    assert texts and not any(attached(tokenize(t)) & GROUP_1 for t in texts)
    assert negatives.counts["image_leaks_dropped"] > 0 and negatives.counts["caption_leaks_dropped"] > 0


def test_a_training_caption_with_a_held_out_pair_is_refused(world: World) -> None:
    leaking = next(k for k, g in enumerate(world.graphs) if mentioned(g) & GROUP_1)
    vocab = Vocabulary.build(c for caps in world.captions for c in caps)
    store = Counterfactuals(grid_regions, WORLD_SEED, SIZE)
    with pytest.raises(ValueError, match="training caption of image"):
        hard_negatives([world.graphs[leaking]], [world.captions[leaking]], GROUP_1, store, vocab, 16, seed=0)


def test_another_world_seed_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match="world seed 1"):
        image_negatives(world.graphs[0], mentioned(world.graphs[0]), WORLD_SEED + 1, SIZE)
