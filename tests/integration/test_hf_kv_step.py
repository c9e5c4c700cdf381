"""``compcap import hf --step kv`` (model contract v3, ``export.hf.kv_step``) on the tiny random ViT + GPT-2
and BLIP captioners the other import tests make: the kv step graph, fed back its own ``state_out`` through
``state`` / ``state_new`` / ``state_index``, computes on onnxruntime what the plain step graph computes on
the whole prefixes, over a decode where beams are reordered every call and images join at different
calls; the manifest describes its state; its top k works; and the engine's captions with it are
``generate()``'s."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

import service.engine.runner as runner_module
from compcap_lab.snapshots import blip, vit_gpt2
from export.hf.importer import PARITY_TOLERANCE, HfImportError, import_hf
from export.hf.step_choice import choose
from export.packaging.topk import add_top_k_file
from service.engine.engine import CaptionEngine
from service.engine.runner import resize_images
from service.engine.state_rows import StateRows, pooled_feed
from service.manifest import Manifest, load_manifest
from tests.hf_checks import assert_near_ties, generate_differences, refuse_network

NAME = "cap"
ARCHITECTURES = ["vit_gpt2", "blip"]
ENGINE_V3 = "state_index" in Path(runner_module.__file__).read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch)


@pytest.fixture(scope="module", params=ARCHITECTURES)
def snapshot(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    make = vit_gpt2.build if request.param == "vit_gpt2" else blip.build
    return make(tmp_path_factory.mktemp("hf") / request.param, image_size=64)


def _imported(tiny_repo: Path, snapshot: Path, out: Path, form: str) -> Path:
    """The kv import with its graphs fused (``--fuse on``: kept wherever correct, whatever the timing),
    the plain one without (``--fuse off``)."""
    shutil.copytree(tiny_repo, out)
    fuse = "off" if form == "plain" else "on"
    report = import_hf(snapshot, NAME, out, step_form=form, programs=False, fuse=fuse)  # type: ignore[arg-type]
    assert all(diff <= PARITY_TOLERANCE for diff in report.parity.values()), report.parity
    assert report.step is None if form == "plain" else report.step is not None and report.step.kept == form
    if fuse == "on":  # both graphs fused by onnxruntime's transformer optimizer, within the tolerance
        assert [f.graph for f in report.fusions] == [f"{NAME}_encoder", f"{NAME}_step"]
        assert all(f.fusions and f.kept and f.diff <= PARITY_TOLERANCE for f in report.fusions), (
            report.fusions
        )
    else:
        assert report.fusions == []
    return out


@pytest.fixture(scope="module")
def kv_repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _imported(tiny_repo, snapshot, tmp_path_factory.mktemp("kv") / "model_repo", "kv")


@pytest.fixture(scope="module")
def plain_repo(tiny_repo: Path, snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _imported(tiny_repo, snapshot, tmp_path_factory.mktemp("plain") / "model_repo", "plain")


def _session(repo: Path, model: str) -> ort.InferenceSession:
    return ort.InferenceSession(
        str(load_manifest(repo).model(model).path(repo)), providers=["CPUExecutionProvider"]
    )


def _slots(manifest: Manifest) -> int:
    """Tcap: the longest prefix, start token counted (the manifest's max_length is generate's less 1)."""
    return manifest.captioner(NAME).max_length + 1


def test_the_manifest_describes_its_state(kv_repo: Path, plain_repo: Path) -> None:
    manifest, plain = load_manifest(kv_repo), load_manifest(plain_repo)
    cap = manifest.captioner(NAME)
    assert cap.kv_cache and cap.image_cache and not plain.captioner(NAME).kv_cache
    assert cap.single_caption_ms is not None and cap.single_caption_ms > 0  # timed once it served
    assert cap.reads == "prefix" and plain.captioner(NAME).state_dim == 1
    s = cap.state_dim
    assert s > 1 and s % (2 * _slots(manifest)) == 0  # layers x 2 x heads x Tcap x head_dim
    step = manifest.model(cap.step)
    inputs = {t.name: (t.dtype, t.dims) for t in step.inputs}
    assert inputs["state"] == ("FP32", [-1, s]) and inputs["state_new"] == ("FP32", [-1, s])
    assert inputs["state_index"] == ("INT64", [-1])
    assert {t.name: t.dims for t in step.outputs}["state_out"] == [-1, s]
    encoder = manifest.model(cap.init)
    assert {t.name: t.dims for t in encoder.outputs}["state"] == [s]
    graph = {i.name for i in _session(kv_repo, cap.step).get_inputs()}
    assert graph == {"memory", "image_index", "tokens", "length", "state", "state_new", "state_index"}
    # the encoder: the plain import's memory (what explanations attribute to; its graph fused here, within
    # the import's tolerance), zero state
    images = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    memory, state = _session(kv_repo, cap.init).run(None, {"image": images})
    plain_memory, _ = _session(plain_repo, cap.init).run(None, {"image": images})
    assert float(np.abs(memory - plain_memory).max()) <= PARITY_TOLERANCE
    assert state.shape == (3, s) and not state.any()


def test_the_kv_graph_decodes_as_the_plain_graph(kv_repo: Path, plain_repo: Path) -> None:
    """A beam-search-like decode on onnxruntime: three images, one joining at call 0 and two together
    at call 2 (``state_new`` of two rows mid-way, beside the pool), three beams each; every call each row
    continues from a parent of its own image (a beam reorder, rows shuffled) with one of its parent's
    three best next tokens under the plain graph, until its prefix fills every slot. At every call
    the kv graph's log-probs and attention are the plain graph's on the whole prefixes."""
    manifest = load_manifest(kv_repo)
    cap = manifest.captioner(NAME)
    assert cap.tokens is not None
    start, slots, width = cap.tokens.bos_id, _slots(manifest), cap.state_dim
    images = np.random.default_rng(1).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    memory, initial = _session(kv_repo, cap.init).run(None, {"image": images})
    kv, plain = _session(kv_repo, cap.step), _session(plain_repo, cap.step)
    joins = {0: [0], 2: [1, 2]}
    rng = np.random.default_rng(2)
    live: list[tuple[int, list[int], int]] = []  # (image, prefix, its state's row in the previous state_out)
    pool = np.zeros((0, width), dtype=np.float32)
    calls, worst, filled = 0, 0.0, 0
    while True:
        joining = joins.get(calls, [])
        rows = [row for row in live if len(row[1]) <= slots]
        rows += [(i, [start], len(pool) + j) for j, i in enumerate(joining) for _ in range(3)]
        if not rows:
            break
        rows = [rows[k] for k in rng.permutation(len(rows))]
        n, t = len(rows), max(len(p) for _, p, _ in rows)
        tokens = np.full((n, t), cap.tokens.pad_id, dtype=np.int64)
        for k, (_, prefix, _) in enumerate(rows):
            tokens[k, : len(prefix)] = prefix
        common = {
            "memory": memory,
            "image_index": np.array([i for i, _, _ in rows], dtype=np.int64),
            "tokens": tokens,
            "length": np.array([len(p) for _, p, _ in rows], dtype=np.int64),
        }
        new = initial[joining]
        assert new.shape == (len(joining), width)
        index = np.array([r for *_, r in rows], dtype=np.int64)
        got = kv.run(None, {**common, **pooled_feed(StateRows(pool, new, index))})  # as the runner feeds
        want = plain.run(None, {**common, "state": np.zeros((n, 1), dtype=np.float32)})
        for name, a, b in (("logprobs", got[0], want[0]), ("attention", got[2], want[2])):
            diff = float(np.abs(a - b).max())
            assert diff <= PARITY_TOLERANCE, (calls, name, diff)
            worst = max(worst, diff)
        assert got[1].shape == (n, width)
        filled = max(filled, t)
        pool, live = got[1], []
        best = np.argsort(-want[0], axis=1)[:, :3]
        for image, _, _ in rows:
            parent = int(rng.choice([k for k, row in enumerate(rows) if row[0] == image]))
            live.append((image, [*rows[parent][1], int(rng.choice(best[parent]))], parent))
        calls += 1
    assert filled == slots and calls == slots + 2, "every slot written and read; the late images finished"
    print(f"kv vs plain over {calls} calls: max abs diff {worst:.1e}")


def test_its_graph_returns_its_top_k(kv_repo: Path, tmp_path: Path) -> None:
    manifest = load_manifest(kv_repo)
    cap = manifest.captioner(NAME)
    assert cap.tokens is not None
    path = tmp_path / "model.onnx"
    shutil.copyfile(manifest.model(cap.step).path(kv_repo), path)
    add_top_k_file(path, cap.tokens.eos_id)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(4).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    memory, state = _session(kv_repo, cap.init).run(None, {"image": images})
    feed = {
        "memory": memory,
        "image_index": np.array([0, 1, 1], dtype=np.int64),
        "tokens": np.full((3, 1), cap.tokens.bos_id, dtype=np.int64),
        "length": np.ones(3, dtype=np.int64),
        "state": state,  # a first call: the new states as the pool
        "state_new": np.zeros((0, cap.state_dim), dtype=np.float32),
        "state_index": np.array([0, 1, 1], dtype=np.int64),
        "top_k": np.array([4], dtype=np.int64),
    }
    logprobs, top, words, eos = session.run(["logprobs", "top_logprobs", "top_tokens", "eos_logprob"], feed)
    np.testing.assert_array_equal(top, np.take_along_axis(logprobs, words, axis=1))
    np.testing.assert_array_equal(np.sort(top, axis=1)[:, ::-1], np.sort(logprobs, axis=1)[:, ::-1][:, :4])
    np.testing.assert_array_equal(eos, logprobs[:, cap.tokens.eos_id])


def test_choose_keeps_the_form_asked_for(kv_repo: Path, plain_repo: Path) -> None:
    """``--step kv`` keeps the kv graph whatever the timings (``auto`` is the one that compares them)."""
    manifest = load_manifest(kv_repo)
    cap = manifest.captioner(NAME)
    plain, kv = manifest.model(cap.step).path(plain_repo), manifest.model(cap.step).path(kv_repo)
    memory = (cap.memory_dims[0], cap.memory_dims[1])
    assert cap.tokens is not None
    timing = choose(
        plain, None, memory, cap.tokens.size, _slots(manifest), "kv", kv=kv, state_dim=cap.state_dim
    )
    assert timing.kept == "kv" and timing.cached_ms is None and timing.kv_ms is not None
    assert "kv cache" in timing.summary()
    auto = choose(
        plain, None, memory, cap.tokens.size, _slots(manifest), "auto", kv=kv, state_dim=cap.state_dim
    )
    assert auto.kept in ("plain", "kv")
    with pytest.raises(ValueError, match="state_dim"):
        choose(plain, None, memory, cap.tokens.size, _slots(manifest), "auto", kv=kv)


def test_git_has_no_kv_step(tiny_repo: Path, tmp_path: Path) -> None:
    from compcap_lab.snapshots import git

    snapshot = git.build(tmp_path / "git", image_size=64)
    repo = tmp_path / "model_repo"
    shutil.copytree(tiny_repo, repo)
    with pytest.raises(HfImportError, match="--step kv"):
        import_hf(snapshot, NAME, repo, step_form="kv", programs=False)
    assert load_manifest(repo) == load_manifest(tiny_repo)


SEARCHES = [  # (beams, n_best, length_penalty, early_stopping), as test_hf_import's
    (1, 1, 1.0, False),
    (5, 1, 1.0, True),
    (4, 3, 2.0, False),
    (6, 6, 0.0, True),
]


@pytest.mark.skipif(
    not ENGINE_V3, reason="engine v3 pending: service/engine/runner.py reads no state_index yet"
)
def test_captions_are_those_of_generate(kv_repo: Path, snapshot: Path) -> None:
    """Greedy and beam search on 20 images with the kv step: the engine's n-best captions are
    ``generate()``'s, token for token, with the same sequence scores; a difference only at a near-tie
    (scores within 1e-4), at most 5% of the captions (as test_hf_import / test_hf_blip)."""
    manifest = load_manifest(kv_repo)
    cap = manifest.captioner(NAME)
    assert cap.image is not None and cap.tokens is not None and cap.kv_cache
    images = np.random.default_rng(11).integers(0, 256, (20, 96, 96, 3), dtype=np.uint8)
    x = torch.from_numpy(resize_images(images, 64, 64, cap.image.resample)).permute(0, 3, 1, 2).float() / 255
    mean, std = torch.tensor(cap.image.mean).view(1, 3, 1, 1), torch.tensor(cap.image.std).view(1, 3, 1, 1)
    pixels = (x - mean) / std
    model: Any
    if snapshot.name == "blip":
        from transformers import BlipForConditionalGeneration

        model = BlipForConditionalGeneration.from_pretrained(snapshot, local_files_only=True).eval()
    else:
        from transformers import VisionEncoderDecoderModel

        model = VisionEncoderDecoderModel.from_pretrained(snapshot, local_files_only=True).eval()

    async def ours() -> list[list[list[Any]]]:
        async with await CaptionEngine.from_repo(kv_repo, max_beam_size=8) as engine:
            runs = []
            for beams, n_best, penalty, early in SEARCHES:
                params = engine.resolve(model=NAME, beam_size=beams, n_best=n_best, length_penalty=penalty)
                params = dataclasses.replace(params, early_stopping=early or beams == 1)
                runs.append((await engine.caption(images, params)).results)
            return runs

    runs = asyncio.run(ours())
    differences = []
    for (beams, n_best, penalty, early), results in zip(SEARCHES, runs, strict=True):
        with torch.no_grad():
            ref = model.generate(
                pixel_values=pixels, num_beams=beams, num_return_sequences=n_best, do_sample=False,
                length_penalty=penalty, early_stopping=early,
                output_scores=True, return_dict_in_generate=True,
            )  # fmt: skip
        found, _ = generate_differences(
            results, ref, beams, n_best, end=cap.tokens.eos_id, pad=cap.tokens.pad_id
        )
        differences += [(beams, n_best, *d) for d in found]
    total = 20 * sum(s[1] for s in SEARCHES)
    assert_near_ties([d[2:] for d in differences], total)
    print(f"{total - len(differences)} of {total} captions token-identical to generate(): {differences}")


def test_the_fusion_breakdown_times_each_fusion(plain_repo: Path) -> None:
    """``python -m compcap_lab.steps.fusions``: per graph, the unfused graph, each fusion that changes it
    alone and all of them, each timed (a fraction of the unfused graph's time)."""
    import argparse

    from compcap_lab.steps.fusions import measure

    result = measure(argparse.Namespace(repo=str(plain_repo), model=NAME, repeats=2, json=None))
    cap = load_manifest(plain_repo).captioner(NAME)
    assert set(result["graphs"]) == {cap.init, cap.step}
    for rows in result["graphs"].values():
        assert {"unfused", "all"} <= set(rows) and rows["unfused"]["of_unfused"] == 1.0
        assert all(row["ms"] > 0 and row["of_unfused"] > 0 for row in rows.values())
        assert rows["all"]["fused"]  # the optimizer changed the graph
