"""Behaviour pins: the top captions of the shipped default repository for a fixed image set, at beam 1,
5, 20 and 100, re-ranked and not, with each decoding hook, decoded concurrently through the served
engine path, are token-identical to ``tests/data/pinned_captions.json`` — on any CPU: the repository is
fixed files in git (no training on the machine), and the pins hold under noise ten times the difference
another CPU's kernels make (``tests/pins.py``). If the default models change on purpose, the digest
test says so first; record the pins again with ``python -m tests.pins``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.manifest import load_manifest
from tests.pins import (
    NOISE_SEEDS,
    PINNED,
    REPO,
    Decoded,
    decode_cases,
    degenerate,
    image_result,
    pin_images,
    repo_digest,
)


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PINNED.read_text(encoding="utf-8"))
    if repo_digest(REPO, load_manifest(REPO)) != data["repo_digest"]:
        pytest.fail("the shipped default models changed: record the pins again (python -m tests.pins)")
    return data


def checked(pinned: dict[str, Any]) -> list[tuple[int, int]]:
    """The pinned (case, image) pairs: all but the recorded near ties."""
    ties = {(n, i) for n, i, _ in pinned["near_ties"]}
    count = pinned["images"]["count"]
    return [(n, i) for n in range(len(pinned["cases"])) for i in range(count) if (n, i) not in ties]


def mismatches(pinned: dict[str, Any], decoded: list[Decoded]) -> list[str]:
    cases = pinned["cases"]
    return [
        f"case {n} image {i} {cases[n]['options']}"
        for n, i in checked(pinned)
        if image_result(decoded[n], i) != image_result((cases[n]["captions"], cases[n]["original"]), i)
    ]


@pytest.fixture(scope="module")
def decode(pinned: dict[str, Any]) -> Any:
    images = pin_images(pinned, load_manifest(REPO))
    return lambda noise_seed=None: decode_cases(REPO, pinned["cases"], images, noise_seed)


def test_the_pins_are_strong(pinned: dict[str, Any]) -> None:
    """Enough cases, nearly all of them pinned, and no pinned caption degenerate."""
    pairs = checked(pinned)
    assert len(pinned["cases"]) >= 60
    assert len(pairs) >= 0.95 * len(pinned["cases"]) * pinned["images"]["count"]
    for n, i in pairs:
        case = pinned["cases"][n]
        captions = image_result((case["captions"], case["original"]), i)[0]
        assert not any(degenerate(t) for t in captions), (n, i, captions)


def test_captions_are_token_identical_to_the_pins(pinned: dict[str, Any], decode: Any) -> None:
    assert mismatches(pinned, decode()) == []


@pytest.mark.parametrize("seed", NOISE_SEEDS)
def test_the_pins_hold_under_noise_above_another_cpus_rounding(
    pinned: dict[str, Any], decode: Any, seed: int
) -> None:
    assert mismatches(pinned, decode(noise_seed=seed)) == []
