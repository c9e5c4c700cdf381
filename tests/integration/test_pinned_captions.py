"""Behaviour pins: the top captions of the shipped default repository for a fixed image set, at beam 1,
5, 20 and 100, re-ranked and not, with each decoding hook, decoded concurrently through the served
engine path, are token-identical to ``tests/data/pinned_captions.json`` — on any CPU: the repository is
fixed files in git (no training on the machine), and the pins hold under noise ten times the difference
another CPU's kernels make (``tests/pins.py``). If the default models change on purpose, the digest
test says so first; record the pins again with ``python -m tests.pins``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from service.manifest import load_manifest
from tests.pins import (
    NOISE_SEEDS,
    PINNED,
    REPO,
    ROOT,
    checked,
    decode_cases,
    degenerate,
    image_result,
    mismatches,
    pin_images,
    repo_digest,
)


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PINNED.read_text(encoding="utf-8"))
    if repo_digest(REPO, load_manifest(REPO)) != data["repo_digest"]:
        pytest.fail("the shipped default models changed: record the pins again (python -m tests.pins)")
    return data


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


def test_the_pins_hold_with_numpys_kernels_of_an_older_cpu() -> None:
    """numpy picks its SIMD kernels (selection, sorting, exp and log) by CPU as well: with every
    dispatched feature above its baseline disabled (x86-64-v2 on x86), the search gives the same pins."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(__cpu_dispatch__)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.pins", "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"mismatches": [], "dispatched": []}
