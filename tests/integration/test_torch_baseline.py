"""The torch per-request baseline (``loadtests.peers.torch_baseline``) runs the very models the gateway
serves: its greedy captions equal the engine's token for token (torch programs vs onnxruntime), its
re-ranked beams come in the ranker's order, and its server answers like a user's FastAPI app would
(200 with captions, 400 for an upload that is not an image)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient

from loadtests.load.inputs import bench_images, png_bytes
from loadtests.peers.torch_baseline import TorchCaptioner, create_app, missing_programs
from service.engine.engine import CaptionEngine
from service.manifest import load_manifest
from service.metrics import Metrics
from service.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def images(tiny_repo: Path) -> np.ndarray:
    size = load_manifest(tiny_repo).image
    return bench_images(6, size.height, size.width, seed=7)


def test_greedy_captions_equal_the_engines(tiny_repo: Path, images: np.ndarray) -> None:
    assert missing_programs(tiny_repo) == []
    baseline = TorchCaptioner(tiny_repo, rerank=False)

    async def engine_captions() -> list[str]:
        engine = await CaptionEngine.from_settings(Settings(repo=tiny_repo), Metrics())
        try:
            params = engine.resolve(beam_size=1, rerank=False)
            return [
                (await engine.caption(images[i : i + 1], params)).results[0][0].text
                for i in range(len(images))
            ]
        finally:
            await engine.close()

    ours = [baseline.vocab.decode(baseline.caption(image, beam_size=1)[0].tokens) for image in images]
    assert ours == asyncio.run(engine_captions())


def test_beams_come_in_the_rankers_order(tiny_repo: Path, images: np.ndarray) -> None:
    baseline = TorchCaptioner(tiny_repo)
    assert baseline.ranker is not None
    found = baseline.caption(images[0], beam_size=5)
    assert 2 <= len(found) <= 5
    regions = baseline.programs["visual_encoder"](torch.from_numpy(images[0]).float()[None])
    image_emb = baseline.programs[baseline.ranker.image](regions)
    tokens, length = baseline._text_batch([f.tokens for f in found])
    cosine = F.cosine_similarity(baseline.programs[baseline.ranker.text](tokens, length), image_emb, dim=-1)
    assert torch.all(cosine[:-1] >= cosine[1:] - 1e-6)  # re-computed in the returned order: non-increasing


def test_the_server_answers_like_a_users_app(tiny_repo: Path, images: np.ndarray) -> None:
    client = TestClient(create_app(TorchCaptioner(tiny_repo)))
    ok = client.post("/v1/captions?beam_size=3&n_best=2", files={"image": ("x.png", png_bytes(images[1]))})
    assert ok.status_code == 200 and len(ok.json()["captions"]) == 2
    junk = client.post("/v1/captions", files={"image": ("x.png", b"not an image")})
    assert junk.status_code == 400 and "image" in junk.json()["detail"]
