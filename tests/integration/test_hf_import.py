"""``compcap import hf`` on a tiny random ViT + GPT-2 ``VisionEncoderDecoderModel`` made in the test:
the import exports and checks its graphs, adds it to a copy of the tiny repository (model contract
version 2) and the engine and the gateway serve it next to the built-in captioners; what the engine
computes at a step is what transformers computes; a failed or refused import leaves the repository as
it was; nothing reaches the network (every connection but loopback is refused)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from compcap_lab.snapshots import vit_gpt2
from export.hf.importer import PARITY_TOLERANCE, HfImportError, import_hf
from export.hf.snapshot import SnapshotError
from export.quantize import PRECISION
from service.backends.base import infer_outputs
from service.cli import main as cli
from service.engine.engine import CaptionEngine
from service.engine.runner import StepInput, resize_images
from service.engine.sparse import row_top_k
from service.gateway.app import create_app
from service.manifest import load_manifest
from service.settings import Settings
from tests.api.conftest import wait_ready
from tests.hf_checks import assert_near_ties, generate_differences, refuse_network, tree_digest
from tests.quantized import quantized_copy

NAME = "vitgpt2"


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 64 x 64: not the repository's 96, so the engine resizes for it
    return vit_gpt2.build(tmp_path_factory.mktemp("hf") / "vit-gpt2", image_size=64)


@pytest.fixture(scope="module")
def repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "model_repo"
    shutil.copytree(tiny_repo, out)
    report = import_hf(snapshot, NAME, out, step_form="plain")  # the image-cache step: cached_repo
    assert set(report.parity) == {f"{NAME}_encoder", f"{NAME}_step"}
    assert all(diff <= PARITY_TOLERANCE for diff in report.parity.values()), report.parity
    return out


def test_the_manifest_names_its_own_encoder_and_tokenizer(repo: Path, tiny_repo: Path) -> None:
    manifest = load_manifest(repo)
    assert manifest.format_version == 2
    cap = manifest.captioner(NAME)
    assert cap.image is not None and (cap.image.height, cap.image.width) == (64, 64)
    assert (cap.image.mean, cap.image.std) == ([0.5] * 3, [0.5] * 3)
    assert cap.tokens is not None and (repo / cap.tokens.file).is_file()
    assert (cap.tokens.bos_id, cap.tokens.eos_id, cap.tokens.pad_id) == (0, 0, 1)
    assert manifest.model(cap.init).role == "captioner_encoder" and cap.reads == "prefix"
    for model in (cap.init, cap.step):
        assert manifest.model(model).path(repo).is_file() and (repo / model / "config.pbtxt").is_file()
    # the built-in captioners are as they were
    before = load_manifest(tiny_repo)
    assert [c for c in manifest.captioners if c.name != NAME] == before.captioners


def test_the_engine_computes_what_transformers_computes(repo: Path, snapshot: Path) -> None:
    from transformers import VisionEncoderDecoderModel

    model = VisionEncoderDecoderModel.from_pretrained(snapshot, local_files_only=True).eval()
    images = np.random.default_rng(3).integers(0, 256, (4, 96, 96, 3), dtype=np.uint8)

    async def engine_first_step() -> tuple[np.ndarray, list[Any]]:
        async with await CaptionEngine.from_repo(repo, max_beam_size=8) as engine:
            enc = await engine.runner.encode(NAME, images)
            tokens = np.zeros((4, 1), dtype=np.int64)  # the decoder start token
            rows = StepInput(enc.memory, np.arange(4), tokens, np.ones(4), enc.state)
            out = await engine.runner.step(NAME, rows)
            captions = await engine.caption(images, engine.resolve(model=NAME, beam_size=3, n_best=3))
            return out.logprobs, captions.results

    logprobs, results = asyncio.run(engine_first_step())
    pixels = torch.from_numpy(resize_images(images, 64, 64)).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        logits = model(
            pixel_values=(pixels - 0.5) / 0.5, decoder_input_ids=torch.zeros(4, 1, dtype=torch.long)
        ).logits
    expected = torch.log_softmax(logits[:, -1], -1).numpy()
    assert np.abs(logprobs - expected).max() <= PARITY_TOLERANCE
    tokenizer = json.loads((repo / "tokenizers" / f"{NAME}.json").read_text())
    assert tokenizer["model"]["type"] == "BPE"
    for per_image in results:
        assert len(per_image) == 3
        for caption in per_image:
            assert caption.tokens and 0 not in caption.tokens  # ended by the end token, not holding it
            assert caption.text.strip() and "▁" not in caption.text  # the tokenizer's decoding


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
    assert report.step is not None and report.step.kept == "cached", report.step
    assert load_manifest(out).captioner(NAME).image_cache is True
    return out


@pytest.fixture(scope="module")
def topk_repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same snapshot imported with a step graph that returns each row's best words (``--top-k on``;
    its vocabulary is too small for ``auto`` to add them)."""
    out = tmp_path_factory.mktemp("topk") / "model_repo"
    shutil.copytree(tiny_repo, out)
    report = import_hf(snapshot, NAME, out, step_form="plain", programs=False, top_k=True)
    assert report.top_k
    step = load_manifest(out).model(f"{NAME}_step")
    assert {"top_logprobs", "top_tokens", "eos_logprob"} <= {o.name for o in step.outputs}
    assert "top_k" in {i.name for i in step.inputs}
    return out


@pytest.mark.parametrize("step", ["plain", "image_cache", "top_k", "graph_top_k"])
def test_captions_are_those_of_generate(
    step: str,
    repo: Path,
    cached_repo: Path,
    topk_repo: Path,
    snapshot: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Greedy and beam search on 20 images: the engine's n-best captions are ``generate()``'s
    (``num_return_sequences``), token for token, with the same sequence scores; a difference is allowed
    only at a near-tie (scores within 1e-4), at most 5% of the captions, and listed. With either step
    graph: the plain one (``repo`` imports it) or the image-cache one; and with beam search reading each
    row's best words only (``top_k``: what a vocabulary of real size gets; this one is made to), taken on
    the host or returned by the step graph itself (``graph_top_k``, only those outputs asked for)."""
    repo = {"image_cache": cached_repo, "graph_top_k": topk_repo}.get(step, repo)
    reduced: list[int] = []
    asked: list[tuple[str, ...]] = []
    if step in ("top_k", "graph_top_k"):
        import service.engine.runner as runner_module
        import service.engine.scheduler as scheduler_module

        def counted(logprobs: np.ndarray, k: int, eos: int) -> Any:
            reduced.append(k)
            return row_top_k(logprobs, k, eos)

        async def asking(backend: Any, model: str, inputs: Any, outputs: Any, keep: Any = ()) -> Any:
            asked.append(tuple(outputs))
            return await infer_outputs(backend, model, inputs, outputs, keep)

        monkeypatch.setattr(scheduler_module, "SPARSE_MIN_VOCAB", 1)
        monkeypatch.setattr(runner_module, "row_top_k", counted)
        monkeypatch.setattr(runner_module, "infer_outputs", asking)
    from transformers import VisionEncoderDecoderModel

    model = VisionEncoderDecoderModel.from_pretrained(snapshot, local_files_only=True).eval()
    images = np.random.default_rng(11).integers(0, 256, (20, 96, 96, 3), dtype=np.uint8)
    pixels = torch.from_numpy(resize_images(images, 64, 64)).permute(0, 3, 1, 2).float() / 255

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
    for (beams, n_best, penalty, early), results in zip(SEARCHES, runs, strict=True):
        with torch.no_grad():
            ref = model.generate(
                pixel_values=(pixels - 0.5) / 0.5, num_beams=beams, num_return_sequences=n_best,
                do_sample=False, length_penalty=penalty, early_stopping=early,
                output_scores=True, return_dict_in_generate=True,
            )  # fmt: skip
        found, _ = generate_differences(results, ref, beams, n_best, end=0, pad=1)
        differences += [(beams, n_best, *d) for d in found]
    total = 20 * sum(s[1] for s in SEARCHES)
    assert_near_ties([d[2:] for d in differences], total)
    same = total - len(differences)
    print(f"{same} of {total} captions token-identical to generate(); differences: {differences}")
    assert (step == "top_k") == bool(reduced), "the host's top k ran (only) where it was meant to"
    if step == "graph_top_k":
        assert ("top_logprobs", "top_tokens", "eos_logprob", "state_out") in asked, "the graph's top k"
        assert not any("logprobs" in names for names in asked if "top_tokens" in names)


def test_the_gateway_serves_it_with_the_request_options(repo: Path) -> None:
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1, max_beam_size=8))) as client:
        wait_ready(client)
        models = {m["name"]: m for m in client.get("/v1/models").json()["captioners"]}
        assert NAME in models and "butr" in models
        image = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
        from io import BytesIO

        from PIL import Image

        buf = BytesIO()
        Image.fromarray(image).save(buf, format="PNG")
        files = {"image": ("x.png", buf.getvalue(), "image/png")}
        ok = client.post(f"/v1/captions?model={NAME}&beam_size=4&n_best=2", files=files)
        assert ok.status_code == 200, ok.text
        body = ok.json()
        first = body["results"][0]["captions"]
        assert len(first) == 2 and all(c["text"] for c in first)
        banned = first[0]["tokens"][0]
        hooks = json.dumps(
            [
                {"name": "ban_words", "params": {"ids": [banned]}},
                {"name": "no_repeat_ngram", "params": {"n": 2}},
            ]
        )
        hooked = client.post(
            f"/v1/captions?model={NAME}&beam_size=4&n_best=2", files=files, data={"hooks": hooks}
        )
        assert hooked.status_code == 200, hooked.text
        for caption in hooked.json()["results"][0]["captions"]:
            assert banned not in caption["tokens"]
        # a word of several tokens is banned as a sequence: "dog" is "▁do" "g" for this tokenizer
        dog = [83, 9]
        words = json.dumps([{"name": "ban_words", "params": {"words": ["dog", "red"]}}])
        unbanned = client.post(f"/v1/captions?model={NAME}&beam_size=8&n_best=8", files=files)
        banned_run = client.post(
            f"/v1/captions?model={NAME}&beam_size=8&n_best=8", files=files, data={"hooks": words}
        )
        assert banned_run.status_code == 200, banned_run.text
        for caption in banned_run.json()["results"][0]["captions"]:
            t = caption["tokens"]
            assert 111 not in t and not any(t[k : k + 2] == dog for k in range(len(t) - 1))
        assert unbanned.json() != banned_run.json()
        # synonym_substitution on words of one token each, and to a word of two: "bla" ("▁bla", a token
        # this random model writes as its most likely one) -> "dog" ("▁do" "g"), written whole
        pairs = json.dumps(
            [{"name": "synonym_substitution", "params": {"pairs": [["a", "the"], ["red", "cat"]]}}]
        )
        swapped = client.post(f"/v1/captions?model={NAME}", files=files, data={"hooks": pairs})
        assert swapped.status_code == 200, swapped.text
        assert swapped.json()["results"][0]["original_captions"], "the original captions (O) come with S"
        longer = json.dumps(
            [{"name": "synonym_substitution", "params": {"pairs": [["bla", "dog"]], "return_original": True}}]
        )
        to_dog = client.post(
            f"/v1/captions?model={NAME}&beam_size=8&n_best=8", files=files, data={"hooks": longer}
        )
        assert to_dog.status_code == 200, to_dog.text
        result = to_dog.json()["results"][0]
        assert result["original_captions"] and result["captions"] != result["original_captions"]
        s_tokens = [c["tokens"] for c in result["captions"]]
        for t in s_tokens:  # "▁do" "g" whole wherever "▁do" is written (unless it ends at max_length)
            assert all(t[k + 1 : k + 2] in ([dog[1]], []) for k in range(len(t)) if t[k] == dog[0])
        assert any(t[k : k + 2] == dog for t in s_tokens for k in range(len(t)))
        reranked = client.post(f"/v1/captions?model={NAME}&rerank=vsepp", files=files)
        assert reranked.status_code == 200, reranked.text  # VSE++ reads its captions as words
        builtin = client.post("/v1/captions?model=butr", files=files)
        assert builtin.status_code == 200  # the built-in captioners serve as before
        b64 = base64.b64encode(buf.getvalue()).decode()
        configurations = [{"name": "imported", "model": NAME}, {"name": "builtin", "model": "butd"}]
        compared = client.post("/v1/compare", json={"images": [b64], "configurations": configurations})
        assert compared.status_code == 200, compared.text
        assert set(compared.json()["images"][0]["captions"]) == {"imported", "builtin"}
        # attention explanations: its last layer's cross-attention over the ViT's 4 x 4 patches, per token
        explained = client.post("/v1/explain", json={"model": NAME, "image": b64, "method": "attention"})
        assert explained.status_code == 200, explained.text
        body = explained.json()
        assert body["grid"] == [4, 4] and body["words"]
        for entry in body["words"]:
            assert np.asarray(entry["values"]).shape == (4, 4) and 0 <= entry["argmax_region"] < 16
        pieces = "".join(e["word"] for e in body["words"] if e["word"])
        assert pieces.replace(" ", "") and body["caption"]
        ref = {"probe_set": "systematicity", "image_id": 0}
        grounded = client.post("/v1/explain", json={"model": NAME, "image_ref": ref, "method": "attention"})
        assert grounded.status_code == 200, grounded.text
        assert grounded.json()["scene_graph"] is True and "grounding_score" in grounded.json()
        forced = client.post(
            "/v1/explain", json={"model": NAME, "image": b64, "method": "attention", "caption": "a red bus"}
        )
        assert forced.status_code == 200, forced.text
        assert forced.json()["caption"] == "a red bus" and forced.json()["source"] == "client"
        gradient = client.post("/v1/explain", json={"model": NAME, "image": b64, "method": "saliency"})
        assert gradient.status_code == 200, gradient.text  # its torch programs: test_hf_features.py
        assert gradient.json()["grid"] == [4, 4]


def test_importing_again_replaces_it(repo: Path, snapshot: Path) -> None:
    before = load_manifest(repo)
    import_hf(snapshot, NAME, repo, step_form="plain", programs=False)  # the later tests need none
    after = load_manifest(repo)
    assert [m.name for m in after.models] == [m.name for m in before.models]
    assert [c.name for c in after.captioners] == [c.name for c in before.captioners]
    assert not any(p.name.startswith(".import") for p in repo.iterdir())


def test_importing_again_into_a_quantized_repository_drops_its_stale_variants(
    repo: Path, snapshot: Path, tmp_path: Path
) -> None:
    """``compcap quantize`` made its step's variant; importing it again replaces the FP32 model, so the
    variant (made from the earlier weights) leaves the manifest and the repository, its models serve FP32
    at every precision until quantize runs again, and the other variants are still served."""
    quantized, result = quantized_copy(repo, tmp_path, models=[f"{NAME}_step", "butr_step"])
    assert result.variant.passed and f"{NAME}_step" in result.variant.models
    variant = result.variant.models[f"{NAME}_step"]
    import_hf(snapshot, NAME, quantized, step_form="plain", programs=False)
    manifest = load_manifest(quantized)
    int8 = manifest.precision_variants[PRECISION]
    assert f"{NAME}_step" not in int8.models and "butr_step" in int8.models
    assert {f"{NAME}_step", f"{NAME}_encoder"} <= set(int8.skipped)
    assert not (quantized / variant).exists() and (quantized / int8.models["butr_step"]).is_dir()
    served = manifest.served_models(PRECISION)
    assert served[f"{NAME}_step"] == f"{NAME}_step" and served["butr_step"] == int8.models["butr_step"]
    with TestClient(create_app(Settings(repo=quantized, precision=PRECISION, intra_op_threads=1))) as client:
        wait_ready(client)
        listed = client.get("/v1/models").json()
        assert listed["precision"] == PRECISION
        assert "butr_step" in listed["quantized_models"] and f"{NAME}_step" not in listed["quantized_models"]
        buf = io.BytesIO()
        Image.fromarray(np.zeros((64, 64, 3), dtype=np.uint8)).save(buf, format="PNG")
        files = {"image": ("x.png", buf.getvalue(), "image/png")}
        for model in (NAME, "butr"):
            answer = client.post(f"/v1/captions?model={model}", files=files)
            assert answer.status_code == 200, answer.text


def test_a_refused_import_leaves_the_repository_as_it_was(
    repo: Path, snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = tree_digest(repo)
    broken = tmp_path / "no-tokenizer"
    shutil.copytree(snapshot, broken)
    (broken / "tokenizer.json").unlink()
    with pytest.raises(SnapshotError, match=r"tokenizer\.json"):
        import_hf(broken, "other", repo)
    with pytest.raises(HfImportError, match="already"):
        import_hf(snapshot, "butr", repo)
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert cli(["import", "hf", str(bert), "--name", "x", "--repo", str(repo)]) == 2
    assert "importable: VisionEncoderDecoderModel" in capsys.readouterr().err
    (bert / "config.json").write_text(json.dumps({"model_type": "git"}))  # importable, but no weights here
    assert cli(["import", "hf", str(bert), "--name", "x", "--repo", str(repo)]) == 2
    assert "no tokenizer.json" in capsys.readouterr().err
    assert tree_digest(repo) == digest


def test_the_transformers_peer_answers(repo: Path, snapshot: Path) -> None:
    """``compcap bench --baseline transformers``'s peer server: the snapshot's generate() behind a plain
    route, started as the bench starts it, answers a caption request."""
    from io import BytesIO

    import httpx
    from PIL import Image

    from loadtests.load.http_load import Gateway

    buf = BytesIO()
    Image.fromarray(np.zeros((96, 96, 3), dtype=np.uint8)).save(buf, format="PNG")
    module = ["loadtests.peers.transformers_baseline", "--snapshot", str(snapshot)]
    with Gateway(repo, {}, module=module, ready="/health") as server:
        files = {"image": ("x.png", buf.getvalue(), "image/png")}
        answer = httpx.post(f"{server.url}/v1/captions?beam_size=3&n_best=2", files=files, timeout=60)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["captions"]) == 2


def test_the_bench_runs_it_against_its_peers_in_rounds(repo: Path, snapshot: Path, tmp_path: Path) -> None:
    """``compcap bench --baseline transformers --rounds 2``: the gateway, the per-request transformers
    server, generate() batched offline and Optimum's ONNX Runtime model (its environment is ``make
    test``'s: ``make optimum-venv``) run in turn at each client count, twice; every round's CompCap figure
    is paired with that round's peers', and the ratio's range is the rounds' own ratios."""
    import json

    from loadtests.bench.bench import main as bench_main
    from loadtests.bench.peer_rounds import BATCHED, COMPCAP, OPTIMUM, OPTIMUM_PYTHON, PER_REQUEST

    assert OPTIMUM_PYTHON.is_file(), "Optimum's environment: `make optimum-venv` (make test makes it)"
    out = tmp_path / "peers.json"
    argv = ["--repo", str(repo), "--model", NAME, "--baseline", "transformers", "--snapshot", str(snapshot)]
    argv += ["--rounds", "2", "--clients", "2", "--seconds", "1", "--images", "4", "--json", str(out)]
    assert bench_main(argv) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    order = [(r["round"], r["setup"], r["clients"]) for r in result["rows"]]
    setups = (COMPCAP, PER_REQUEST, BATCHED, OPTIMUM)
    assert order == [(r, s, 2) for r in (1, 2) for s in setups]  # A B C D A B C D
    assert all(r["captions_per_s"] > 0 and r["peak_mb"] > 0 and r["cores_used"] > 0 for r in result["rows"])
    pairs = {(p["clients"], p["peer"]): p for p in result["pairs"]}
    assert set(pairs) == {(2, PER_REQUEST), (2, BATCHED), (2, OPTIMUM)}
    for (clients, peer), pair in pairs.items():
        ours = {r["round"]: r for r in result["rows"] if r["setup"] == COMPCAP and r["clients"] == clients}
        theirs = {r["round"]: r for r in result["rows"] if r["setup"] == peer and r["clients"] == clients}
        ratios = [ours[k]["captions_per_s"] / theirs[k]["captions_per_s"] for k in (1, 2)]
        assert pair["rounds"] == 2
        assert pair["ratio"]["range"] == [round(min(ratios), 3), round(max(ratios), 3)]


def test_hooks_on_the_graphs_top_k_give_the_whole_rows_captions(
    repo: Path, topk_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests with decoding hooks on the step that returns its top k (each hook on the rows' best words,
    k widened by what it may remove) caption as the same requests on whole rows: token for token."""
    import service.engine.scheduler as scheduler_module

    images = np.random.default_rng(12).integers(0, 256, (6, 96, 96, 3), dtype=np.uint8)
    hooks = [
        [{"name": "no_repeat_ngram", "params": {"n": 1}}],
        [{"name": "ban_words", "params": {"ids": [5, 6, 7, 8]}}],
        [{"name": "min_length", "params": {"min_words": 5}}, {"name": "no_repeat_ngram", "params": {"n": 2}}],
    ]

    async def captions(where: Path) -> list[list[list[int]]]:
        async with await CaptionEngine.from_repo(where, max_beam_size=8) as engine:
            out = []
            for hook in hooks:
                params = engine.resolve(model=NAME, beam_size=4, n_best=2, hooks=hook)
                out.append([[c.tokens for c in r] for r in (await engine.caption(images, params)).results])
            return out

    import service.engine.runner as runner_module

    asked: list[int] = []

    async def asking(backend: Any, model: str, inputs: Any, outputs: Any, keep: Any = ()) -> Any:
        if "top_tokens" in outputs:
            asked.append(int(inputs["top_k"][0]))
        return await infer_outputs(backend, model, inputs, outputs, keep)

    whole = asyncio.run(captions(repo))
    monkeypatch.setattr(scheduler_module, "SPARSE_MIN_VOCAB", 1)
    monkeypatch.setattr(runner_module, "infer_outputs", asking)
    assert asyncio.run(captions(topk_repo)) == whole
    assert asked and max(asked) > 4 + 1, f"the hooks' steps read the graph's top k, widened: {set(asked)}"


@pytest.mark.parametrize("graph", ["plain", "top_k"])
def test_triton_serves_it_as_the_embedded_backend_does(
    graph: str, repo: Path, topk_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local Triton server (its python-backend mirror of the same ONNX files) on the repository with
    the imported captioner: the same captions, token for token, as onnxruntime in process; with a step
    that returns its top k too, each backend asked for the top-k outputs alone."""
    from service.tritonlocal.server import LocalTriton, TritonInstall

    if graph == "top_k":
        import service.engine.scheduler as scheduler_module

        monkeypatch.setattr(scheduler_module, "SPARSE_MIN_VOCAB", 1)
        repo = topk_repo
    try:
        TritonInstall.find()
    except FileNotFoundError as exc:
        pytest.skip(f"{exc} (`make test` creates it)")
    images = np.random.default_rng(5).integers(0, 256, (4, 96, 96, 3), dtype=np.uint8)
    server = LocalTriton(repo)
    try:
        server.start()
        server.wait_ready(timeout=120)

        async def both() -> tuple[list[list[list[int]]], list[list[list[int]]]]:
            on_triton = await CaptionEngine.from_repo(
                repo, backend="triton", triton_url=server.grpc_url, max_beam_size=8
            )
            async with on_triton, await CaptionEngine.from_repo(repo, max_beam_size=8) as embedded:
                a = await on_triton.caption(images, on_triton.resolve(model=NAME, beam_size=4, n_best=2))
                b = await embedded.caption(images, embedded.resolve(model=NAME, beam_size=4, n_best=2))
            return [[c.tokens for c in r] for r in a.results], [[c.tokens for c in r] for r in b.results]

        triton_tokens, embedded_tokens = asyncio.run(both())
    finally:
        server.stop()
    assert triton_tokens == embedded_tokens


@pytest.fixture(scope="module")
def with_clip(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from compcap_lab.snapshots import clip

    snapshot = clip.build(tmp_path_factory.mktemp("hf") / "clip")
    out = tmp_path_factory.mktemp("with-clip") / "model_repo"
    shutil.copytree(repo, out)
    report = import_hf(snapshot, "clip", out)
    assert set(report.parity) == {"clip_image", "clip_text"}
    assert all(diff <= PARITY_TOLERANCE for diff in report.parity.values()), report.parity
    return out, snapshot


def test_clip_reranks_any_captioner_with_its_own_cosine(with_clip: tuple[Path, Path]) -> None:
    """CLIP imported as a ranker reads the images (its own resize and centre crop) and the captions'
    text (its own tokenizer): it re-ranks the imported captioner and a built-in one, and its scores are
    CLIPModel's cosine of the same image and caption."""
    from transformers import CLIPImageProcessor, CLIPModel

    from service.text.subword import SubwordVocabulary

    repo, snapshot = with_clip
    ranker = load_manifest(repo).ranker("clip")
    assert ranker.reads == "pixels" and ranker.image_preprocessing is not None
    assert ranker.image_preprocessing.resize == [56, 56] and ranker.tokens is not None
    images = np.random.default_rng(2).integers(0, 256, (3, 96, 96, 3), dtype=np.uint8)

    async def reranked() -> dict[str, list[list[Any]]]:
        async with await CaptionEngine.from_repo(repo, max_beam_size=8) as engine:
            out = {}
            for model in (NAME, "butd"):
                params = engine.resolve(model=model, beam_size=4, n_best=4, rerank="clip")
                out[model] = (await engine.caption(images, params)).results
            return out

    results = asyncio.run(reranked())
    model = CLIPModel.from_pretrained(snapshot, local_files_only=True).eval()
    processor = CLIPImageProcessor.from_pretrained(snapshot, local_files_only=True)
    vocab = SubwordVocabulary.load(repo / ranker.tokens.file, ranker.tokens.size, 0, 0, 1)
    text_config = model.config.text_config
    from PIL import Image

    for name, per_model in results.items():
        for i, captions in enumerate(per_model):
            scores = [c.ranker_score for c in captions]
            assert scores == sorted(scores, reverse=True), (name, scores)  # rerank_weight 0: CLIP's order
            pixels = processor(images=Image.fromarray(images[i]), return_tensors="pt").pixel_values
            with torch.no_grad():
                image = model.visual_projection(model.vision_model(pixel_values=pixels).pooler_output)
                for caption in captions:
                    ids = vocab.encode(caption.text)[: text_config.max_position_embeddings - 2]
                    tokens = torch.tensor([[text_config.bos_token_id, *ids, text_config.eos_token_id]])
                    text = model.text_projection(model.text_model(input_ids=tokens).pooler_output)
                    cosine = float(torch.nn.functional.cosine_similarity(image, text)[0])
                    assert abs(caption.ranker_score - cosine) <= 1e-4, (name, caption.text, cosine)


def test_the_gateway_reranks_an_imported_captioner(
    with_clip: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    repo, snapshot = with_clip
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.fromarray(np.random.default_rng(4).integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(buf, "PNG")
    files = {"image": ("x.png", buf.getvalue(), "image/png")}
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1, max_beam_size=8))) as client:
        wait_ready(client)
        assert "clip" in {r["name"] for r in client.get("/v1/models").json()["rankers"]}
        for ranker in ("clip", "vsepp"):  # CLIP, and VSE++ on the captions' words
            answer = client.post(
                f"/v1/captions?model={NAME}&beam_size=4&n_best=3&rerank={ranker}", files=files
            )
            assert answer.status_code == 200, answer.text
            assert all(c["ranker_score"] is not None for c in answer.json()["results"][0]["captions"])
    assert (
        cli(["import", "hf", str(snapshot), "--name", "x", "--repo", str(repo), "--role", "captioner"]) == 2
    )
    assert "is a ranker" in capsys.readouterr().err


def test_probes_and_every_hook_run_on_it(repo: Path) -> None:
    """A systematicity, a productivity and a substitutivity probe job decode the imported captioner's
    captions (the spaCy parse and the scores run on its text; the synonym table restricted to the words
    its tokenizer writes); min_length and diverse_beam act on its tokens."""
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.fromarray(np.random.default_rng(8).integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(buf, "PNG")
    files = {"image": ("x.png", buf.getvalue(), "image/png")}
    with TestClient(create_app(Settings(repo=repo, intra_op_threads=1, max_beam_size=8))) as client:
        wait_ready(client)
        hooks = json.dumps([{"name": "min_length", "params": {"min_words": 6}}])
        longer = client.post(
            f"/v1/captions?model={NAME}&beam_size=4&n_best=4", files=files, data={"hooks": hooks}
        )
        assert longer.status_code == 200, longer.text
        assert all(len(c["tokens"]) >= 6 for c in longer.json()["results"][0]["captions"])
        diverse = json.dumps([{"name": "diverse_beam", "params": {"groups": 2, "diversity_penalty": 5.0}}])
        grouped = client.post(
            f"/v1/captions?model={NAME}&beam_size=4&n_best=4", files=files, data={"hooks": diverse}
        )
        assert grouped.status_code == 200, grouped.text
        assert grouped.json()["hooks"] == ["diverse_beam"]
        for kind in ("systematicity", "productivity", "substitutivity"):
            started = client.post(
                "/v1/probes", json={"kind": kind, "model": NAME, "beam_size": 2, "images": 2}
            )
            assert started.status_code == 202, started.text
            job_id = started.json()["id"]
            for _ in range(600):
                job = client.get(f"/v1/probes/{job_id}").json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            assert job["status"] == "succeeded", job
            assert job["params"]["model"] == NAME and job["result"] and job["summary"]


def test_calibrated_captions_say_whether_the_image_is_in_domain(repo: Path, tmp_path: Path) -> None:
    """``compcap calibrate`` on the built-in captioners (SceneWorld validation images) and on the imported
    one (a folder of images): every caption response then says per image whether it is in domain —
    SceneWorld images mostly are, uniform noise is not."""
    from io import BytesIO

    from PIL import Image

    from export.packaging.calibrate import calibrate_repo
    from sceneworld.dataset import generate

    calibrated = tmp_path / "model_repo"
    shutil.copytree(repo, calibrated)
    figures = calibrate_repo(calibrated, ["butr"], images=300)
    assert figures["butr"]["uniform_noise"]["flagged"] == 1.0
    folder = tmp_path / "own"
    folder.mkdir()
    for k, image in enumerate(generate(40, 77, 96)[0]):
        Image.fromarray(image).save(folder / f"{k}.png")
    calibrate_repo(calibrated, [NAME], data=folder)
    manifest = load_manifest(calibrated)
    assert manifest.captioner("butr").domain is not None and manifest.captioner(NAME).domain is not None
    world = generate(10, 7919, 96)[0]
    noise = np.random.default_rng(0).integers(0, 256, (3, 96, 96, 3), dtype=np.uint8)
    with TestClient(create_app(Settings(repo=calibrated, intra_op_threads=1))) as client:
        wait_ready(client)
        for model in ("butr", NAME):
            flags = {}
            for label, batch in (("world", world), ("noise", noise)):
                files = []
                for image in batch:
                    buf = BytesIO()
                    Image.fromarray(image).save(buf, "PNG")
                    files.append(("image", ("x.png", buf.getvalue(), "image/png")))
                answer = client.post(f"/v1/captions?model={model}&beam_size=2", files=files)
                assert answer.status_code == 200, answer.text
                flags[label] = [r["in_domain"] for r in answer.json()["results"]]
                assert all(isinstance(r["domain_score"], float) for r in answer.json()["results"])
            assert not any(flags["noise"]), (model, flags)
            assert sum(flags["world"]) >= 7, (model, flags)
        uncalibrated = client.post("/v1/captions?model=butd", files=files).json()
        assert uncalibrated["results"][0]["in_domain"] is None
