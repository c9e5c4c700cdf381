"""``compcap import hf`` on a tiny random ``GitForCausalLM`` made in the test (a decoder-only captioner:
the image's projected features in front of the text in one transformer): the import exports and checks
its two graphs (the features as the encoder's ``memory``, the text side with them given instead of
``pixel_values`` as the step), adds it to a copy of the tiny repository, and the engine's captions are
``generate()``'s, token for token, with the same scores; the gateway serves it; nothing reaches the
network (every connection but loopback is refused)."""

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

from compcap_lab.snapshots import git
from export.hf.importer import PARITY_TOLERANCE, import_hf
from export.hf.snapshot import SnapshotError
from service.engine.engine import CaptionEngine
from service.engine.runner import StepInput, prepare_images
from service.gateway.app import create_app
from service.manifest import Preprocessing, load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.hf_checks import assert_near_ties, generate_differences, refuse_network

NAME = "tinygit"
CLS, SEP, PAD = 2, 3, 0  # the tiny WordPiece tokenizer's [CLS], [SEP], [PAD]


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 64 x 64 with a shortest-edge resize and centre crop (CLIP's processor): the engine resizes for it
    return git.build(tmp_path_factory.mktemp("hf") / "git", image_size=64)


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "model_repo"
    shutil.copytree(tiny_repo, out)
    report = import_hf(snapshot, NAME, out, programs=False)  # the crop test imports its own, with them
    assert report.architecture == "GitForCausalLM" and report.programs == {}
    assert set(report.parity) == {f"{NAME}_encoder", f"{NAME}_step"}
    assert all(diff <= PARITY_TOLERANCE for diff in report.parity.values()), report.parity
    print(f"parity (max abs diff, transformers vs onnxruntime): {report.parity}")
    return out


def load_model(snapshot: Path) -> Any:
    from transformers import GitForCausalLM

    return GitForCausalLM.from_pretrained(snapshot, local_files_only=True, attn_implementation="eager").eval()


def pixel_values(images: np.ndarray, pre: Preprocessing) -> torch.Tensor:
    """What the engine gives the encoder, normalised as the image processor does."""
    pixels = torch.from_numpy(prepare_images(images, pre)).permute(0, 3, 1, 2).float() * pre.rescale
    return (pixels - torch.tensor(pre.mean).view(1, 3, 1, 1)) / torch.tensor(pre.std).view(1, 3, 1, 1)


def test_the_manifest_names_its_own_encoder_and_tokenizer(repo: Path, tiny_repo: Path) -> None:
    manifest = load_manifest(repo)
    assert manifest.format_version == 2
    cap = manifest.captioner(NAME)
    assert cap.architecture == "GitForCausalLM" and cap.reads == "prefix" and cap.search == "transformers"
    assert cap.image is not None and (cap.image.height, cap.image.width) == (64, 64)
    assert (cap.image.resize, cap.image.resample) == ([64, 64], "bicubic")  # CLIP's shortest edge, crop
    assert cap.memory_dims == [(64 // 16) ** 2 + 1, 32]  # the patches and the class token, projected
    assert cap.tokens is not None and (repo / cap.tokens.file).is_file()
    assert (cap.tokens.bos_id, cap.tokens.eos_id, cap.tokens.pad_id) == (CLS, SEP, PAD)
    assert cap.max_length == 11  # generate's max_length 12 counts [CLS]
    for model in (cap.init, cap.step):
        assert manifest.model(model).path(repo).is_file() and (repo / model / "config.pbtxt").is_file()
    before = load_manifest(tiny_repo)
    assert [c for c in manifest.captioners if c.name != NAME] == before.captioners


def test_the_engine_computes_what_transformers_computes(repo: Path, snapshot: Path) -> None:
    """A step on the engine's graphs (onnxruntime) against ``GitForCausalLM``'s forward on the whole
    prefix with ``pixel_values``: the next token's log-probabilities and the last layer's attention
    onto the image positions."""
    model = load_model(snapshot)
    pre = load_manifest(repo).captioner(NAME).image
    assert pre is not None
    images = np.random.default_rng(3).integers(0, 256, (4, 96, 96, 3), dtype=np.uint8)
    prefixes = np.array([[CLS, 0, 0], [CLS, 40, 0], [CLS, 40, 51], [CLS, 7, 0]], dtype=np.int64)
    length = np.array([1, 2, 3, 2], dtype=np.int64)

    async def engine_step() -> tuple[np.ndarray, np.ndarray | None, list[Any]]:
        async with await CaptionEngine.from_repo(repo, max_beam_size=8) as engine:
            enc = await engine.runner.encode(NAME, images)
            rows = StepInput(enc.memory, np.arange(4), prefixes, length, enc.state)
            out = await engine.runner.step(NAME, rows)
            captions = await engine.caption(images, engine.resolve(model=NAME, beam_size=3, n_best=3))
            return out.logprobs, out.attention, captions.results

    logprobs, attention, results = asyncio.run(engine_step())
    pixels = pixel_values(images, pre)
    assert attention is not None and attention.shape == (4, 17)
    for r in range(4):
        with torch.no_grad():
            out = model(
                input_ids=torch.from_numpy(prefixes[r : r + 1, : length[r]]),
                pixel_values=pixels[r : r + 1],
                output_attentions=True,
            )
        expected = torch.log_softmax(out.logits[0, -1], -1).numpy()
        assert np.abs(logprobs[r] - expected).max() <= PARITY_TOLERANCE
        expected_attention = out.attentions[-1][0, :, -1, :17].mean(0).numpy()
        assert np.abs(attention[r] - expected_attention).max() <= PARITY_TOLERANCE
    tokenizer = json.loads((repo / "tokenizers" / f"{NAME}.json").read_text())
    assert tokenizer["model"]["type"] == "WordPiece"
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(snapshot, local_files_only=True)
    for per_image in results:
        assert len(per_image) == 3
        for caption in per_image:
            assert caption.tokens and SEP not in caption.tokens and caption.tokens[0] != CLS
            # the text is the snapshot tokenizer's decoding (continuation pieces joined to their word)
            assert caption.text == theirs.decode(caption.tokens, skip_special_tokens=True).strip()


SEARCHES = [  # (beams, n_best, length_penalty, early_stopping): generate's settings the engine follows
    (1, 1, 1.0, False),
    (5, 1, 1.0, True),
    (5, 1, 1.0, False),
    (4, 3, 2.0, False),
    (6, 6, 0.0, True),
]


def test_captions_are_those_of_generate(repo: Path, snapshot: Path) -> None:
    """Greedy and beam search on 20 images: the engine's n-best captions are ``generate()``'s
    (``num_return_sequences``, started at ``[CLS]``, ended by ``[SEP]``), token for token, with the
    same sequence scores; a difference is allowed only at a near-tie (scores within 1e-4), at most 5%
    of the captions, and listed."""
    model = load_model(snapshot)
    pre = load_manifest(repo).captioner(NAME).image
    assert pre is not None
    images = np.random.default_rng(11).integers(0, 256, (20, 96, 96, 3), dtype=np.uint8)
    pixels = pixel_values(images, pre)

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
    ended = empty = 0
    for (beams, n_best, penalty, early), results in zip(SEARCHES, runs, strict=True):
        with torch.no_grad():
            ref = model.generate(
                pixel_values=pixels, num_beams=beams, num_return_sequences=n_best,
                do_sample=False, length_penalty=penalty, early_stopping=early,
                output_scores=True, return_dict_in_generate=True,
            )  # fmt: skip
        assert bool((ref.sequences[:, 0] == CLS).all())  # generate starts at bos_token_id
        found, rows = generate_differences(results, ref, beams, n_best, end=SEP)
        differences += [(beams, n_best, *d) for d in found]
        ended += sum(SEP in row for row in rows)
        empty += sum(row[:1] == [SEP] for row in rows)
    total = 20 * sum(s[1] for s in SEARCHES)
    assert ended > 0.2 * total, "the tiny model's captions should end with [SEP] now and then"
    assert_near_ties([d[2:] for d in differences], total)
    same = total - len(differences)
    print(f"{same} of {total} captions token-identical to generate(); {ended} end by [SEP], {empty} at once")
    print(f"differences: {differences}")


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
        assert len(first) == 2 and any(c["text"] for c in first)  # [CLS] [SEP] would be an empty one
        banned = first[0]["tokens"][0]
        hooks = json.dumps([{"name": "ban_words", "params": {"ids": [banned]}}])
        hooked = client.post(
            f"/v1/captions?model={NAME}&beam_size=4&n_best=2", files=files, data={"hooks": hooks}
        )
        assert hooked.status_code == 200, hooked.text
        for caption in hooked.json()["results"][0]["captions"]:
            assert banned not in caption["tokens"]
        builtin = client.post("/v1/captions?model=butr", files=files)
        assert builtin.status_code == 200  # the built-in captioners serve as before


def test_a_video_git_is_refused(repo: Path, snapshot: Path, tmp_path: Path) -> None:
    """A GIT of several frames (``num_image_with_embedding``) is not what the contract's encoder reads:
    refused, naming why, and the repository is as it was."""
    manifest = (repo / "manifest.json").read_bytes()
    video = tmp_path / "video-git"
    shutil.copytree(snapshot, video)
    config = json.loads((video / "config.json").read_text())
    (video / "config.json").write_text(json.dumps({**config, "num_image_with_embedding": 6}))
    with pytest.raises(SnapshotError, match="video GIT"):
        import_hf(video, "videogit", repo)
    assert (repo / "manifest.json").read_bytes() == manifest
    assert not any(p.name.startswith(".import") or p.name.startswith("videogit") for p in repo.iterdir())


def test_a_centre_cropping_encoder_is_explained_over_its_crop(
    repo: Path, snapshot: Path, tmp_path: Path
) -> None:
    """An image processor that resizes the shortest edge to 80 and crops 64 at the centre: the encoder
    sees only the crop, so its patch grid (attention and gradients) lies on the crop's box in the image
    (``grid_area``), and every word's argmax cell is inside it."""
    cropped = tmp_path / "git-crop"
    shutil.copytree(snapshot, cropped)
    config = json.loads((cropped / "preprocessor_config.json").read_text())
    config["size"] = {"shortest_edge": 80}
    (cropped / "preprocessor_config.json").write_text(json.dumps(config))
    out = tmp_path / "model_repo"
    shutil.copytree(repo, out)
    import_hf(cropped, "gitcrop", out)
    pre = load_manifest(out).captioner("gitcrop").image
    assert pre is not None and pre.resize == [80, 80] and (pre.height, pre.width) == (64, 64)
    box = [96 * 8 / 80, 96 * 8 / 80, 96 * 72 / 80, 96 * 72 / 80]  # the crop (8..72 of 80) in 96-pixel units
    ref = {"probe_set": "systematicity", "image_id": 0}
    with TestClient(create_app(Settings(repo=out, intra_op_threads=1))) as client:
        wait_ready(client)
        for method, to in (("attention", "regions"), ("saliency", "pixels")):
            answer = client.post(
                "/v1/explain",
                json={"model": "gitcrop", "image_ref": ref, "method": method, "attribute_to": to},
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["grid"] == [4, 4] and body["grid_area"] == pytest.approx(box)
            assert body["scene_graph"] is True and body["words"]
            for entry in body["words"]:
                x0, y0, x1, y1 = entry["argmax_box"]
                assert box[0] - 1e-6 <= x0 < x1 <= box[2] + 1e-6 and box[1] - 1e-6 <= y0 < y1 <= box[3] + 1e-6
                assert x1 - x0 == pytest.approx((box[2] - box[0]) / 4)


def test_without_its_programs_the_gradient_methods_say_so(repo: Path) -> None:
    """Imported with ``programs=False`` (``compcap import hf --no-programs``): a gradient method answers
    501 ``programs_missing`` naming the graphs, the methods listing greys it out, attention works."""
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1))) as client:
        wait_ready(client)
        ref = {"probe_set": "systematicity", "image_id": 0}
        refused = client.post("/v1/explain", json={"model": NAME, "image_ref": ref, "method": "saliency"})
        assert refused.status_code == 501 and refused.json()["error"]["code"] == "programs_missing"
        assert f"{NAME}_step" in refused.text
        attention = client.post("/v1/explain", json={"model": NAME, "image_ref": ref, "method": "attention"})
        assert attention.status_code == 200, attention.text
        listed = client.get(f"/v1/explain/methods?model={NAME}")
        assert listed.status_code == 200, listed.text
        assert "programs" in str(listed.json()).lower()
