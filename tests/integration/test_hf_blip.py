"""``compcap import hf`` on a tiny random ``BlipForConditionalGeneration`` made in the test: the import
exports and checks its graphs (ONNX parity), adds it to a copy of the tiny repository with the ids BLIP's
``generate()`` uses (``[DEC]`` starts, ``[SEP]`` ends, ``[PAD]`` pads, the text decoder's default
length), the engine's step is transformers' and its captions are ``generate()``'s token for token, and
the gateway serves it; nothing reaches the network (every connection but loopback is refused)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from compcap_lab.snapshots import blip
from export.hf.architectures.blip import max_tokens
from export.hf.importer import PARITY_TOLERANCE, import_hf
from service.engine.engine import CaptionEngine
from service.engine.runner import StepInput, resize_images
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.hf_checks import assert_near_ties, generate_differences, refuse_network

NAME = "blip"
SIZE = 64


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return blip.build(tmp_path_factory.mktemp("hf") / "blip", image_size=SIZE)


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "model_repo"
    shutil.copytree(tiny_repo, out)
    report = import_hf(snapshot, NAME, out, step_form="plain", programs=False)  # image cache: cached_repo
    assert set(report.parity) == {f"{NAME}_encoder", f"{NAME}_step"}
    assert all(diff <= PARITY_TOLERANCE for diff in report.parity.values()), report.parity
    print(f"ONNX parity (max abs diff): {report.parity}")
    return out


@pytest.fixture(scope="module")
def model(snapshot: Path) -> Any:
    from transformers import BlipForConditionalGeneration

    return BlipForConditionalGeneration.from_pretrained(snapshot, local_files_only=True).eval()


@pytest.fixture(scope="module")
def ids(snapshot: Path) -> dict[str, int]:
    tokenizer = json.loads((snapshot / "tokenizer.json").read_text())
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    return {**vocab, **{t["content"]: t["id"] for t in tokenizer["added_tokens"]}}


def pixels(images: np.ndarray, pre: Any) -> torch.Tensor:
    """The repository-size images as the engine resizes them for BLIP, then what BlipImageProcessor
    does at its own size: rescale, mean/std."""
    x = torch.from_numpy(resize_images(images, SIZE, SIZE, pre.resample)).permute(0, 3, 1, 2).float() / 255
    mean, std = torch.tensor(pre.mean).view(1, 3, 1, 1), torch.tensor(pre.std).view(1, 3, 1, 1)
    return (x - mean) / std


def test_the_manifest_holds_the_ids_generate_uses(repo: Path, tiny_repo: Path, ids: dict[str, int]) -> None:
    manifest = load_manifest(repo)
    cap = manifest.captioner(NAME)
    assert cap.architecture == "BlipForConditionalGeneration" and cap.search == "transformers"
    assert cap.image is not None and cap.tokens is not None
    assert (cap.image.height, cap.image.width, cap.image.resample) == (64, 64, "bicubic")
    assert cap.image.mean == pytest.approx([0.48145466, 0.4578275, 0.40821073])
    assert (repo / cap.tokens.file).is_file() and cap.tokens.size == len(ids)
    # [DEC] starts (not [CLS], the text config's eos_token_id), [SEP] ends, [PAD] pads
    assert (cap.tokens.bos_id, cap.tokens.eos_id, cap.tokens.pad_id) == (
        ids["[DEC]"],
        ids["[SEP]"],
        ids["[PAD]"],
    )
    assert cap.max_length == 20 and cap.early_stopping is False  # generate's defaults: 20 new tokens
    assert cap.memory_dims == [1 + (SIZE // 16) ** 2, 32]  # the class token and 4 x 4 patches
    before = load_manifest(tiny_repo)
    assert [c for c in manifest.captioners if c.name != NAME] == before.captioners


def test_the_length_is_that_of_the_text_decoders_generate() -> None:
    """BLIP's generate() runs the text decoder's generate() on the one-token prompt ``[DEC]``: its
    ``max_new_tokens`` counts after it, a ``max_length`` counts it, and without either generate adds 20
    new tokens, capped at the position embeddings."""
    from transformers import GenerationConfig

    assert max_tokens(GenerationConfig(max_new_tokens=7), 64) == 8
    assert max_tokens(GenerationConfig(max_length=12), 64) == 12
    assert max_tokens(GenerationConfig(), 64) == 21
    assert max_tokens(GenerationConfig(), 16) == 16


def test_the_engine_steps_as_transformers_does(repo: Path, model: Any, ids: dict[str, int]) -> None:
    """The engine's step (onnxruntime) on right-padded prefixes of different lengths gives the text
    decoder's next-token log-probabilities of each unpadded prefix."""
    cap = load_manifest(repo).captioner(NAME)
    images = np.random.default_rng(3).integers(0, 256, (3, 96, 96, 3), dtype=np.uint8)
    prefixes = [[ids["[DEC]"]], [ids["[DEC]"], 7, 9, 11], [ids["[DEC]"], 20], [ids["[DEC]"], 5, 30]]
    image_index = np.array([0, 1, 2, 1])
    tokens = np.full((4, 4), ids["[PAD]"], dtype=np.int64)
    for i, p in enumerate(prefixes):
        tokens[i, : len(p)] = p
    length = np.array([len(p) for p in prefixes])

    async def engine_step() -> np.ndarray:
        async with await CaptionEngine.from_repo(repo, max_beam_size=8) as engine:
            enc = await engine.runner.encode(NAME, images)
            rows = StepInput(enc.memory, image_index, tokens, length, enc.state)
            out = await engine.runner.step(NAME, rows)
            return np.asarray(out.logprobs)

    ours = asyncio.run(engine_step())
    assert cap.image is not None and cap.tokens is not None
    assert ours.shape == (4, cap.tokens.size)
    with torch.no_grad():
        embeds = model.vision_model(pixel_values=pixels(images, cap.image)).last_hidden_state
        for i, p in enumerate(prefixes):
            logits = model.text_decoder(
                input_ids=torch.tensor([p]), encoder_hidden_states=embeds[image_index[i] : image_index[i] + 1]
            ).logits
            expected = torch.log_softmax(logits[0, -1], -1).numpy()
            assert np.abs(ours[i] - expected).max() <= PARITY_TOLERANCE, i


SEARCHES = [  # (beams, n_best, length_penalty, early_stopping): generate's settings the engine follows
    (1, 1, 1.0, False),
    (5, 1, 1.0, True),
    (5, 1, 1.0, False),
    (4, 3, 2.0, False),
    (6, 6, 0.0, True),
]


@pytest.fixture(scope="module")
def cached_repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same snapshot imported with the step that projects cross-attention once per image."""
    out = tmp_path_factory.mktemp("cached") / "model_repo"
    shutil.copytree(tiny_repo, out)
    report = import_hf(snapshot, NAME, out, step_form="cached", programs=False)
    assert report.step is not None and report.step.kept == "cached" and report.parity[f"{NAME}_step"] <= 1e-4
    return out


@pytest.mark.parametrize("step", ["plain", "image_cache"])
def test_captions_are_those_of_generate(
    step: str, repo: Path, cached_repo: Path, snapshot: Path, model: Any, ids: dict[str, int]
) -> None:
    """Greedy and beam search on 20 images: the engine's n-best captions are BLIP ``generate()``'s
    (``num_return_sequences``; its default length), token for token, with the same sequence scores; a
    difference is allowed only at a near-tie (scores within 1e-4), at most 5% of the captions, and
    listed. With either step graph: the plain one (``repo`` imports it) or the image-cache one."""
    repo = cached_repo if step == "image_cache" else repo
    cap = load_manifest(repo).captioner(NAME)
    assert cap.image is not None
    images = np.random.default_rng(11).integers(0, 256, (20, 96, 96, 3), dtype=np.uint8)
    x = pixels(images, cap.image)
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(snapshot, local_files_only=True)
    resized = list(resize_images(images, SIZE, SIZE, cap.image.resample))
    assert torch.allclose(processor(images=resized, return_tensors="pt").pixel_values, x, atol=1e-5)
    end = ids["[SEP]"]

    async def ours() -> list[list[list[Any]]]:
        async with await CaptionEngine.from_repo(repo, max_beam_size=8) as engine:
            runs = []
            for beams, n_best, penalty, early in SEARCHES:
                params = engine.resolve(model=NAME, beam_size=beams, n_best=n_best, length_penalty=penalty)
                assert params.search == "transformers" and params.min_length == 0
                params = dataclasses.replace(params, early_stopping=early or beams == 1)
                runs.append((await engine.caption(images, params)).results)
            return runs

    runs = asyncio.run(ours())
    differences = []
    ended = 0
    for (beams, n_best, penalty, early), results in zip(SEARCHES, runs, strict=True):
        with torch.no_grad():
            ref = model.generate(
                pixel_values=x, num_beams=beams, num_return_sequences=n_best, do_sample=False,
                length_penalty=penalty, early_stopping=early,
                output_scores=True, return_dict_in_generate=True,
            )  # fmt: skip
        assert bool(
            (ref.sequences[:, 0] == ids["[DEC]"]).all()
        )  # generate's output starts with the start token
        found, rows = generate_differences(results, ref, beams, n_best, end=end)
        differences += [(beams, n_best, *d) for d in found]
        ended += sum(end in row for row in rows)
    total = 20 * sum(s[1] for s in SEARCHES)
    assert 0 < ended < total  # some captions end at [SEP], some run to max_length
    assert_near_ties([d[2:] for d in differences], total)
    same = total - len(differences)
    print(f"{same} of {total} captions token-identical to generate() ({ended} end at [SEP]); {differences}")


def test_the_gateway_serves_it(repo: Path) -> None:
    from PIL import Image

    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1, max_beam_size=8))) as client:
        wait_ready(client)
        models = {m["name"]: m for m in client.get("/v1/models").json()["captioners"]}
        assert NAME in models and "butr" in models
        image = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
        buf = BytesIO()
        Image.fromarray(image).save(buf, format="PNG")
        files = {"image": ("x.png", buf.getvalue(), "image/png")}
        ok = client.post(f"/v1/captions?model={NAME}&beam_size=4&n_best=2", files=files)
        assert ok.status_code == 200, ok.text
        first = ok.json()["results"][0]["captions"]
        assert len(first) == 2
        for caption in first:  # WordPiece's decoding: continuation pieces joined, no special tokens
            assert "##" not in caption["text"] and "[" not in caption["text"]
        banned = next(c["tokens"][0] for c in first if c["tokens"])
        hooks = json.dumps([{"name": "ban_words", "params": {"ids": [banned]}}])
        hooked = client.post(
            f"/v1/captions?model={NAME}&beam_size=4&n_best=2", files=files, data={"hooks": hooks}
        )
        assert hooked.status_code == 200, hooked.text
        for caption in hooked.json()["results"][0]["captions"]:
            assert banned not in caption["tokens"]
        builtin = client.post("/v1/captions?model=butr", files=files)
        assert builtin.status_code == 200  # the built-in captioners serve as before
