"""Behaviour pin: the top captions of the tiny repository for a fixed image set, at beam 1, 5 and 100,
re-ranked and not, with each decoding hook, decoded concurrently through the served engine path, are
token-identical to ``tests/data/pinned_captions.json`` (recorded on the engine before the issue-9
redesign). The tiny build is deterministic; if its models change, the digest check says so first."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from export.world.dataset import generate
from service.engine.engine import CaptionEngine
from service.probes.substitution import caption_with_original, resolve_with_original

PINNED = Path(__file__).resolve().parents[1] / "data" / "pinned_captions.json"


def repo_digest(repo: Path) -> str:
    files = sorted([*repo.glob("*/1/model.onnx"), repo / "vocab.json"])
    lines = "".join(f"{f.relative_to(repo)}:{hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PINNED.read_text(encoding="utf-8"))
    return data


def test_tiny_repository_is_the_pinned_one(tiny_repo: Path, pinned: dict[str, Any]) -> None:
    assert repo_digest(tiny_repo) == pinned["repo_digest"], "the tiny build changed: its pins no longer apply"


def test_captions_are_token_identical_to_the_pins(tiny_repo: Path, pinned: dict[str, Any]) -> None:
    if repo_digest(tiny_repo) != pinned["repo_digest"]:
        pytest.fail("the tiny build changed: its pins no longer apply")
    images = generate(pinned["images"]["count"], seed=pinned["images"]["world_seed"], image_size=96)[0]
    cases = pinned["cases"]

    async def run() -> list[Any]:
        async with await CaptionEngine.from_repo(tiny_repo, intra_op_threads=1, max_beam_size=100) as engine:
            params = [resolve_with_original(engine, case["options"]) for case in cases]
            return list(
                await asyncio.gather(*(caption_with_original(engine, images, s, o) for s, o in params))
            )

    outputs = asyncio.run(run())
    assert len(cases) >= 60
    for case, (out, original_out) in zip(cases, outputs, strict=True):
        got = [[c.tokens for c in per] for per in out.results]
        assert got == case["captions"], case["options"]
        original = None if original_out is None else [[c.tokens for c in per] for per in original_out]
        assert original == case["original"], case["options"]
