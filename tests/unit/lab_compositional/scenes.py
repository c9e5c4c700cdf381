"""A handful of SceneWorld scenes for the compositional ranker's tests (``world`` in ``conftest.py``):
images, captions and scene graphs of training world seed 0 at the tiny preset's image size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from export.presets import get_preset
from sceneworld.dataset import generate
from service.text.concepts import ConceptPair

WORLD_SEED = 0
SIZE = get_preset("tiny").image_size


@dataclass(frozen=True)
class World:
    images: np.ndarray  # uint8 [N, S, S, 3]
    captions: list[list[str]]
    graphs: list[dict[str, Any]]


def make_world(images: int = 48) -> World:
    return World(*generate(images, WORLD_SEED, SIZE))


def recorded(caption: dict[str, Any]) -> frozenset[ConceptPair]:
    """The pairs the scene graph records that ``caption`` (one of its ``captions``) mentions."""
    return frozenset(ConceptPair(*p) for p in caption["pairs"])


def mentioned(graph: dict[str, Any]) -> frozenset[ConceptPair]:
    """The pairs some caption of the scene mentions."""
    return frozenset(p for c in graph["captions"] for p in recorded(c))


def grid_regions(images: np.ndarray, grid: int = 6) -> torch.Tensor:
    """A stand-in for the visual encoder that keeps colour and layout: each cell's mean colour of a
    ``grid`` x ``grid`` grid, uint8 [M, S, S, 3] -> float32 [M, grid², 3] in [-1, 1]."""
    m, s = len(images), images.shape[1] // grid
    cells = images[:, : grid * s, : grid * s].reshape(m, grid, s, grid, s, 3).mean((2, 4))
    return torch.from_numpy((cells.reshape(m, grid * grid, 3) / 127.5 - 1.0).astype(np.float32))
