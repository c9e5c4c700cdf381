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
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.engine.captioning import CaptionEngine, EngineLimits, SchedulerLimits
from service.manifest import load_manifest
from service.text.vocabulary import Vocabulary

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
    manifest = load_manifest(tiny_repo)
    images = generate(pinned["images"]["count"], seed=pinned["images"]["world_seed"], image_size=96)[0]
    cases = pinned["cases"]

    async def run() -> list[Any]:
        backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
        engine = CaptionEngine(
            backend,
            manifest,
            Vocabulary.load(tiny_repo / manifest.vocabulary.file),
            limits=EngineLimits(max_beam_size=100),
            scheduling=SchedulerLimits(),
        )
        try:
            params = [engine.resolve(**case["options"]) for case in cases]
            return list(await asyncio.gather(*(engine.caption(images, p) for p in params)))
        finally:
            await engine.close()
            await backend.close()

    outputs = asyncio.run(run())
    assert len(cases) >= 60
    for case, out in zip(cases, outputs, strict=True):
        got = [[c.tokens for c in per] for per in out.results]
        assert got == case["captions"], case["options"]
        original = None if out.original is None else [[c.tokens for c in per] for per in out.original]
        assert original == case["original"], case["options"]
