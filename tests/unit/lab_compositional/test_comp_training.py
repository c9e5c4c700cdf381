"""Training the compositional ranker (``train_compositional``) on a handful of scenes: it lowers its loss
(the hardest-negative ranking loss plus the counterfactual hinges), it is deterministic for a seed, and
with the hinges weighted 0 it is the zoo's VSE++ training exactly."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch

from compcap_lab.training.compositional import (
    CounterfactualLoss,
    Counterfactuals,
    Negatives,
    hard_negatives,
    train_compositional,
)
from compcap_lab.training.train import train_vsepp
from export.models.butr import not_negatives, ranking_loss
from export.models.vsepp import VSEPP
from export.presets import Preset, get_preset
from service.text.concepts import load_concepts
from service.text.vocabulary import Vocabulary, encode_batch
from tests.unit.lab_compositional.scenes import SIZE, WORLD_SEED, World, grid_regions, mentioned

# wider and longer than the tiny preset's ranker: a handful of scenes then shows the hinges at work
PRESET = replace(
    get_preset("tiny"),
    word_dim=32,
    hidden_dim=48,
    joint_dim=32,
    ranker_learning_rate=5e-3,
    ranker_epochs=16,
    batch_size=32,
)
HELD_OUT = load_concepts().group(1)


@dataclass(frozen=True)
class TrainingSet:
    regions: torch.Tensor  # [N, R, D]
    captions: list[list[str]]
    negatives: Negatives
    vocab: Vocabulary


@pytest.fixture(scope="module")
def training(world: World) -> TrainingSet:
    rows = [k for k, g in enumerate(world.graphs) if not mentioned(g) & set(HELD_OUT)]
    captions = [world.captions[k] for k in rows]
    vocab = Vocabulary.build(c for caps in captions for c in caps)
    store = Counterfactuals(grid_regions, WORLD_SEED, SIZE)
    graphs = [world.graphs[k] for k in rows]
    negatives = hard_negatives(graphs, captions, HELD_OUT, store, vocab, PRESET.max_length, seed=0)
    return TrainingSet(grid_regions(world.images[rows]), captions, negatives, vocab)


def objective(model: VSEPP, data: TrainingSet, p: Preset) -> tuple[float, float]:
    """(ranking loss over every pair at once, the counterfactual hinges with a fixed draw) of ``model``."""
    image_ids = np.repeat(np.arange(len(data.captions)), [len(c) for c in data.captions])
    tokens, lengths = (
        torch.from_numpy(a)
        for a in encode_batch(data.vocab, [c for caps in data.captions for c in caps], p.max_length)
    )
    pairs = np.arange(len(tokens))
    with torch.no_grad():
        images = model.image_embedding(data.regions[image_ids])
        texts = model.text_embedding(tokens, lengths - 1)
        excluded = not_negatives(torch.from_numpy(image_ids), tokens)
        ranking = ranking_loss(images, texts, excluded, p.margin, hardest=p.hardest_negative_weight)
        hinges = CounterfactualLoss(data.negatives, p.margin, 1.0, np.random.default_rng(0))
        return float(ranking), float(hinges(model, pairs, images, texts))


def untrained(data: TrainingSet, seed: int, p: Preset) -> VSEPP:
    torch.manual_seed(seed)  # as train_vsepp initialises its model
    return VSEPP(len(data.vocab), data.regions.size(-1), p.word_dim, p.hidden_dim, p.joint_dim)


def test_training_lowers_the_loss(training: TrainingSet) -> None:
    """The whole loss falls, and the hinges fall further than VSE++'s own training takes them: the
    counterfactual terms teach what the batch's negatives do not."""
    counts = training.negatives.counts
    assert counts["pairs_with_image_negatives"] > 50 and counts["pairs_with_caption_negatives"] > 50, counts
    args = (training.regions, training.captions, training.negatives, training.vocab, PRESET, 3)
    ranking_before, hinges_before = objective(untrained(training, 3, PRESET), training, PRESET)
    model, log = train_compositional(*args)
    ranking_after, hinges_after = objective(model, training, PRESET)
    assert ranking_after + hinges_after < ranking_before + hinges_before
    _, hinges_without = objective(train_compositional(*args, weight=0.0)[0], training, PRESET)
    assert hinges_after < hinges_without < hinges_before + 0.01
    assert log.extra["image_hinge"] > 0 and log.extra["caption_hinge"] > 0
    assert log.extra["caption_negatives"] == len(training.negatives.caption_tokens)


def _state(model: VSEPP) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_training_is_deterministic_for_a_seed(training: TrainingSet) -> None:
    p = replace(PRESET, ranker_epochs=2)
    args = (training.regions, training.captions, training.negatives, training.vocab, p)
    first, log = train_compositional(*args, 5)
    again, log_again = train_compositional(*args, 5)
    other, _ = train_compositional(*args, 6)
    assert _same(_state(first), _state(again)) and log.losses == log_again.losses
    assert not _same(_state(first), _state(other))


def test_with_weight_zero_it_is_vsepp(training: TrainingSet) -> None:
    """Same initialisation, same batches, the same loss: the negatives draw from a generator of their own."""
    p = replace(PRESET, ranker_epochs=2)
    ours, _ = train_compositional(
        training.regions, training.captions, training.negatives, training.vocab, p, 7, weight=0.0
    )
    theirs, _ = train_vsepp(training.regions, training.captions, training.vocab, p, 7)
    assert _same(_state(ours), _state(theirs))


def test_negatives_of_other_captions_are_refused(training: TrainingSet) -> None:
    with pytest.raises(ValueError, match="negatives are for"):
        train_compositional(
            training.regions[:-1], training.captions[:-1], training.negatives, training.vocab, PRESET, 0
        )
