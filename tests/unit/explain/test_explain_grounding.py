"""The explanations' pure parts: GroundingScore(δ), Needleman–Wunsch, Hungarian coverage, the word →
class lexicon, the region grid geometry, per-word grounding on a scene graph, and the heat-map render."""

from __future__ import annotations

import base64
import io
import itertools
import math

import numpy as np
import pytest
from PIL import Image

from service.explain.geometry import (
    cell_boxes,
    centre_inside,
    fold_slots,
    grid_size,
    object_under,
    pool_to_grid,
)
from service.explain.grounding import (
    DELTAS,
    coverage,
    grounding_intervals,
    grounding_score,
    grounding_scores,
    needleman_wunsch,
)
from service.explain.render import colourise, overlay_png, stretch, upsample
from service.explain.scene import ground_caption
from service.text.lexicon import default_lexicon


def test_grounding_score_by_hand() -> None:
    # words: a dog near a cat; the argmax at step 1 ("dog") is the cat, at step 4 ("cat") the dog,
    # and at step 0 the dog: "dog" is grounded one step early, "cat" never at its own step
    classes = ["bg", "cat", "bg", "bg", "dog"]
    words = ["a", "dog", "near", "a", "cat"]
    nouns = np.array([w in ("dog", "cat") for w in words])
    under = ["dog", *classes[1:]]
    sim = np.array([[1.0 if w == c else 0.0 for c in under] for w in words])
    assert grounding_score(sim, nouns, 0) == 0.0
    assert grounding_score(sim, nouns, 1) == 50.0  # dog: its step or one before
    assert grounding_score(sim, nouns, 3) == 100.0  # cat: step 1 is within 3 of step 4
    assert grounding_score(sim, nouns, math.inf) == 100.0
    assert grounding_scores(sim, np.zeros(5, dtype=bool)) is None


def test_grounding_score_is_monotone_in_delta() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        t = int(rng.integers(1, 12))
        sim = rng.random((t, t)) * (rng.random((t, t)) < 0.4)
        nouns = rng.random(t) < 0.5
        nouns[rng.integers(t)] = True
        scores = grounding_scores(sim, nouns)
        assert scores is not None and list(scores) == ["0", "1", "3", "5", "inf"]
        values = [scores[k] for k in scores]
        assert all(a <= b + 1e-12 for a, b in itertools.pairwise(values)), values
        assert values[0] >= 0.0 and values[-1] <= 100.0
    assert len(DELTAS) == 5


def test_needleman_wunsch() -> None:
    assert needleman_wunsch(["dog", "cat"], ["dog", "cat"]) == 1.0
    assert needleman_wunsch(["dog"], ["cat"]) == 0.0  # a mismatch (0) beats two gaps (-2)
    assert needleman_wunsch(["dog", "cat"], ["cat", "dog"]) == pytest.approx(
        0.0
    )  # two mismatches (0) beat a match and two gaps (-1)
    assert needleman_wunsch([], ["cat", "dog"]) == -1.0
    assert needleman_wunsch(["dog", "man", "cat"], ["dog", "cat"]) == pytest.approx((1 - 1 + 1) / 3)
    assert needleman_wunsch([], []) == 0.0


def test_coverage_is_a_hungarian_assignment() -> None:
    assert coverage(["dog", "dog"], ["dog", "cat"]) == 0.5  # one dog cannot cover two classes
    assert coverage(["cat", "dog", "man"], ["dog", "cat"]) == 1.0
    assert coverage([], ["dog"]) == 0.0 and coverage(["dog"], []) is None
    soft = coverage(["puppy"], ["dog"], lambda a, b: 0.7)
    assert soft == pytest.approx(0.7)


def test_lexicon_maps_synonyms_plurals_backgrounds_and_props() -> None:
    lex = default_lexicon()
    assert lex.noun_class("puppies") == "dog" and lex.noun_class("guy") == "man"
    assert lex.noun_class("field") == "grass" and lex.noun_class("road") == "street"
    assert lex.noun_class("umbrella") == "umbrella"
    assert lex.noun_class("black") is None and lex.noun_class("a") is None
    assert lex.sim("kid", ("child",)) == 1.0 and lex.sim("kid", ("dog",)) == 0.0


def test_grid_geometry() -> None:
    assert grid_size(36) == 6 and grid_size(35) is None
    boxes = cell_boxes(6, 96, 96)
    assert boxes.shape == (36, 4) and boxes[7].tolist() == [16.0, 16.0, 32.0, 32.0]  # row 1, column 1
    folded = fold_slots(np.arange(12.0).reshape(1, 12), 4)  # M2: 3 layers x 4 regions
    assert folded.tolist() == [[0 + 4 + 8, 1 + 5 + 9, 2 + 6 + 10, 3 + 7 + 11]]
    with pytest.raises(ValueError, match="fold"):
        fold_slots(np.zeros((1, 10)), 4)
    pixels = np.zeros((6, 6))
    pixels[4, 5] = 2.0
    assert pool_to_grid(pixels, 3).tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 2.0]
    assert centre_inside([0, 0, 10, 10], [4, 4, 6, 6]) and not centre_inside([0, 0, 10, 10], [6, 6, 9, 9])


def test_object_under_a_cell_prefers_cover_then_the_object_drawn_last() -> None:
    cell = [0.0, 0.0, 10.0, 10.0]
    small = {"id": 0, "noun": "cat", "bbox": [0, 0, 2, 2]}  # covers 4% of the cell
    half = {"id": 1, "noun": "dog", "bbox": [0, 0, 5, 10]}
    other_half = {"id": 2, "noun": "man", "bbox": [5, 0, 10, 10]}
    assert object_under(cell, [small]) is None
    assert object_under(cell, [small, half])["id"] == 1  # type: ignore[index]
    assert object_under(cell, [half, other_half])["id"] == 2  # type: ignore[index]  # tie: drawn last


def test_ground_caption_on_a_scene_graph() -> None:
    scene = {
        "background": "grass",
        "horizon": 32,
        "objects": [{"id": 0, "noun": "dog", "bbox": [0, 48, 32, 96], "prop": None}],
    }
    words = ["a", "puppy", "on", "the", "field"]
    # 6x6 grid of 16 px cells: region 30 = row 5, col 0 (the dog); 35 = row 5, col 5 (grass); 0 = sky
    grounded = ground_caption(words, [0, 30, 35, 0, 35], scene, 6, 96, 96, default_lexicon())
    assert [w.labels for w in grounded.words] == [
        ("backdrop",),
        ("dog",),
        ("grass",),
        ("backdrop",),
        ("grass",),
    ]
    assert grounded.words[1].pointing is True and grounded.words[1].chance == pytest.approx(6 / 36)
    assert grounded.words[4].pointing is None  # the background has no box
    assert grounded.scores == {"0": 100.0, "1": 100.0, "3": 100.0, "5": 100.0, "inf": 100.0}
    late = ground_caption(words, [30, 0, 0, 0, 0], scene, 6, 96, 96, default_lexicon())
    assert late.scores is not None and late.scores["0"] == 0.0 and late.scores["1"] == 50.0
    assert late.words[1].pointing is False


def test_render_stretches_colours_and_encodes_png() -> None:
    unit = stretch(np.linspace(-3, 5, 100).reshape(10, 10))
    assert unit.min() == 0.0 and unit.max() == 1.0
    assert stretch(np.ones((3, 3))).max() == 0.0
    colours = colourise(np.array([[0.0, 1.0]]))
    assert colours.dtype == np.uint8 and not np.array_equal(colours[0, 0], colours[0, 1])
    big = upsample(np.eye(2, dtype=np.float32), 8, 8)
    assert big.shape == (8, 8) and big[0, 0] > big[0, 7]
    png = overlay_png(np.zeros((8, 8, 3), dtype=np.uint8), np.ones((8, 8)) * 0.5, scale=3)
    picture = Image.open(io.BytesIO(base64.b64decode(png)))
    assert picture.size == (24, 24) and picture.format == "PNG"


def test_the_interval_is_over_the_caption_nouns() -> None:
    """GroundingScore(δ) averages the caption's nouns; its interval resamples them."""
    sim = np.zeros((4, 4))
    sim[1, 1] = 1.0  # the first noun grounded at its own step, the second never
    nouns = np.array([False, True, False, True])
    found = grounding_intervals(sim, nouns)
    assert found is not None and list(found) == ["0", "1", "3", "5", "inf"]
    assert found["0"]["nouns"] == 2 and found["0"]["low"] == 0.0 and found["0"]["high"] == 100.0
    assert grounding_intervals(sim, np.array([False, True, False, False]))["0"] == {  # type: ignore[index]
        "low": 100.0,
        "high": 100.0,
        "nouns": 1,
    }
    assert grounding_intervals(sim, np.zeros(4, dtype=bool)) is None
    assert grounding_intervals(sim, nouns) == found  # seeded
