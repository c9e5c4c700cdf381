"""Every feature on an imported subword captioner (a tiny random ViT + GPT-2 made in the test) and an
imported CLIP ranker: gradient explanations are the transformers module's own gradients (Captum on the
torch.export programs the import writes), and the gateway on the local Triton server answers every hook,
CLIP re-ranking, a systematicity probe job, attention and integrated-gradients explanations and a
comparison with a built-in captioner as the embedded backend does. Nothing reaches the network."""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from compcap_lab.snapshots import clip, vit_gpt2
from export.hf.importer import import_hf
from service.engine.runner import resize_images
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.hf_checks import refuse_network
from tests.integration.conftest import local_triton, triton_successes

NAME = "vitgpt2"


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vit_gpt2.build(tmp_path_factory.mktemp("hf") / "vit-gpt2", image_size=64)


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("features") / "model_repo"
    shutil.copytree(tiny_repo, out)
    report = import_hf(snapshot, NAME, out)
    assert set(report.programs) == {f"{NAME}_encoder", f"{NAME}_step"}, report.programs
    import_hf(clip.build(tmp_path_factory.mktemp("hf") / "clip"), "clip", out)
    return out


def png(image: np.ndarray) -> bytes:
    buf = BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


IMAGE = np.random.default_rng(11).integers(0, 256, (96, 96, 3), dtype=np.uint8)


def explain(client: TestClient, **body: Any) -> dict[str, Any]:
    answer = client.post(
        "/v1/explain", json={"model": NAME, "image": base64.b64encode(png(IMAGE)).decode(), **body}
    )
    assert answer.status_code == 200, answer.text
    out: dict[str, Any] = answer.json()
    return out


def reference_gradients(snapshot: Path, tokens: list[int], start: int) -> np.ndarray:
    """d log p(token t | image, tokens < t) / d memory, per token, from the transformers module itself
    (not the exported programs): float64 [T, M, D]."""
    from transformers import VisionEncoderDecoderModel

    model = VisionEncoderDecoderModel.from_pretrained(
        snapshot, local_files_only=True, attn_implementation="eager"
    ).eval()
    resized = resize_images(IMAGE[None], 64, 64)  # as the gateway resizes for this encoder
    pixels = (torch.from_numpy(resized).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5
    with torch.no_grad():
        memory = model.encoder(pixel_values=pixels).last_hidden_state
    grads = []
    for t, token in enumerate(tokens):
        states = memory.clone().requires_grad_(True)
        ids = torch.tensor([[start, *tokens[:t]]])
        logits = model.decoder(input_ids=ids, encoder_hidden_states=states).logits[0, -1]
        torch.log_softmax(logits, -1)[token].backward()
        assert states.grad is not None
        grads.append(states.grad[0].double().numpy())
    return np.stack(grads)


def test_gradient_explanations_are_the_modules_gradients(repo: Path, snapshot: Path) -> None:
    """Saliency is |d S_w / d memory| summed over the features of each ViT patch, guided backprop the
    signed gradient (the graphs have no ReLU: it says so), integrated gradients add up to the score
    gap; on pixels the maps are pooled onto the patch grid and overlaid on the image."""
    cap = load_manifest(repo).captioner(NAME)
    assert cap.tokens is not None and all(
        (repo / load_manifest(repo).model(m).program).is_file()  # type: ignore[operator]
        for m in (cap.init, cap.step)
    )
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1))) as client:
        wait_ready(client)
        saliency = explain(client, method="saliency", caption="a red bus on the grass")
        tokens = [w["index"] for w in saliency["words"]]
        assert tokens == list(range(len(tokens))) and saliency["source"] == "client"
        guided = explain(client, method="guided_backprop", caption="a red bus on the grass")
        ig = explain(client, method="integrated_gradients", caption="a red bus on the grass", n_steps=32)
        pixels = explain(client, method="integrated_gradients", attribute_to="pixels", n_steps=8)
        engine = client.app.state.runtime.engine  # type: ignore[attr-defined]
        ids = engine.vocabs[NAME].encode("a red bus on the grass")
    assert len(ids) == len(saliency["words"]) >= 3
    grads = reference_gradients(snapshot, ids, cap.tokens.bos_id)[:, cap.memory_offset :]  # patches only
    for entry, g in zip(saliency["words"], grads, strict=True):
        assert np.allclose(np.asarray(entry["values"]).ravel(), np.abs(g).sum(-1), rtol=1e-3, atol=1e-5)
    assert (
        guided["guided_backprop"]["relu_modules"] == 0
        and "plain gradient" in guided["guided_backprop"]["note"]
    )
    for entry, g in zip(guided["words"], grads, strict=True):
        assert np.allclose(np.asarray(entry["values"]).ravel(), g.sum(-1), rtol=1e-3, atol=1e-5)
    completeness = ig["integrated_gradients"]
    assert len(completeness["delta"]) == len(ids) and completeness["mean_relative_delta"] < 0.05, completeness
    assert pixels["grid"] == [4, 4] and pixels["grid_area"] == [0.0, 0.0, 96.0, 96.0]
    assert all(np.asarray(w["values"]).shape == (4, 4) and w["overlay_png"] for w in pixels["words"])
    assert len(pixels["integrated_gradients"]["delta"]) == len(pixels["words"])


# ------------------------------------------------------------------------------------------ on Triton
@pytest.fixture(scope="module")
def triton(repo: Path) -> Iterator[Any]:
    with local_triton(repo) as server:
        yield server


HOOKS: list[list[dict[str, Any]]] = [
    [{"name": "ban_words", "params": {"words": ["dog", "red"]}}],
    [{"name": "no_repeat_ngram", "params": {"n": 2}}],
    [{"name": "min_length", "params": {"min_words": 6}}],
    [{"name": "synonym_substitution", "params": {"pairs": [["a", "the"]]}}],
    [{"name": "diverse_beam", "params": {"groups": 2, "diversity_penalty": 2.0}}],
]


def answers(client: TestClient) -> dict[str, Any]:
    """What the gateway answers to every feature on the imported captioner (timings left out)."""
    import json

    files = {"image": ("x.png", png(IMAGE), "image/png")}
    out: dict[str, Any] = {}

    def post(key: str, url: str, **kw: Any) -> None:
        answer = client.post(url, **kw)
        assert answer.status_code in (200, 202), (key, answer.text)
        out[key] = answer.json()

    post("plain", f"/v1/captions?model={NAME}&beam_size=4&n_best=2", files=files)
    for k, hooks in enumerate(HOOKS):
        post(
            f"hook{k}",
            f"/v1/captions?model={NAME}&beam_size=4&n_best=4",
            files=files,
            data={"hooks": json.dumps(hooks)},
        )
    post("clip", f"/v1/captions?model={NAME}&beam_size=4&n_best=3&rerank=clip", files=files)
    b64 = base64.b64encode(png(IMAGE)).decode()
    configurations = [{"name": "imported", "model": NAME}, {"name": "builtin", "model": "butd"}]
    post("compare", "/v1/compare", json={"images": [b64], "configurations": configurations})
    out["attention"] = explain(client, method="attention")
    out["ig"] = explain(client, method="integrated_gradients", n_steps=8)
    started = client.post(
        "/v1/probes", json={"kind": "systematicity", "model": NAME, "beam_size": 2, "images": 2}
    )
    assert started.status_code == 202, started.text
    for _ in range(600):
        job = client.get(f"/v1/probes/{started.json()['id']}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.2)
    assert job["status"] == "succeeded", job
    out["probe"] = job["result"]
    return out


def captions_of(body: dict[str, Any]) -> list[Any]:
    return [[(c["tokens"], c["text"]) for c in r["captions"]] for r in body["results"]]


def test_every_feature_answers_on_triton_as_embedded(repo: Path, triton: Any) -> None:
    before = {
        m: triton_successes(triton, m) for m in (f"{NAME}_encoder", f"{NAME}_step", "clip_image", "clip_text")
    }
    embedded = create_app(Settings(repo=repo, intra_op_threads=1, max_beam_size=8))
    served = create_app(Settings(repo=repo, backend="triton", triton_url=triton.grpc_url, max_beam_size=8))
    with TestClient(embedded) as local, TestClient(served) as remote:
        wait_ready(local)
        wait_ready(remote)
        want, got = answers(local), answers(remote)
    for key in ["plain", *(f"hook{k}" for k in range(len(HOOKS))), "clip"]:
        assert captions_of(got[key]) == captions_of(want[key]), key
        assert got[key]["hooks"] == want[key]["hooks"], key
    for a, b in zip(
        got["clip"]["results"][0]["captions"], want["clip"]["results"][0]["captions"], strict=True
    ):
        assert a["ranker_score"] == pytest.approx(b["ranker_score"], abs=1e-4)
    assert got["hook3"]["results"][0]["original_captions"] == want["hook3"]["results"][0]["original_captions"]
    assert got["compare"]["images"][0]["captions"] == want["compare"]["images"][0]["captions"]
    for key in ("attention", "ig"):
        assert got[key]["caption"] == want[key]["caption"], key
        for a, b in zip(got[key]["words"], want[key]["words"], strict=True):
            assert a["word"] == b["word"] and a["argmax_region"] == b["argmax_region"], key
            assert np.allclose(a["values"], b["values"], atol=1e-4), key
    assert got["probe"] == want["probe"]
    after = {m: triton_successes(triton, m) for m in before}
    assert all(after[m] > before[m] for m in before), (before, after)  # the models ran on Triton
