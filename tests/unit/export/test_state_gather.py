"""Model contract v3 (``export.packaging.state_gather``): a step that gathers its rows' decoder states itself.

A build writes v3 steps; a repository of v2 steps (made here by undoing the gather, as repositories
were written before) still loads and serves the same captions through the host gather, and ``compcap
upgrade`` turns it into v3 — files, configs and manifest — once (a second run changes nothing). The
gather is exact: a v3 step's outputs equal the v2 step's on the gathered rows, bit for bit, for any
pool of previous and new states. A graph without ``state``, or one that gathers already, is refused."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from export.packaging.state_gather import add_state_gather, gathers_state, upgrade_repository
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.engine import CaptionEngine
from service.manifest import MANIFEST_NAME, load_manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary
from tests.unit.engine.test_scheduler import MIXED, images, tokens


def without_state_gather(model: onnx.ModelProto) -> onnx.ModelProto:
    """The v2 step a v3 step was made from: the gather removed, ``state`` [N, S] read directly."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    kept = [n for n in g.node if n.name not in ("compcap_pool", "compcap_state_gather")]
    for node in kept:
        for k, name in enumerate(node.input):
            if name == "compcap_state_rows":
                node.input[k] = "state"
    del g.node[:]
    g.node.extend(kept)
    inputs = [i for i in g.input if i.name not in ("state_new", "state_index")]
    del g.input[:]
    g.input.extend(inputs)
    onnx.checker.check_model(out)
    return out


@pytest.fixture(scope="module")
def v2_repo(tiny_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny repository as written before contract v3."""
    from export.packaging.triton_repo import config_pbtxt
    from service.backends.triton.addresses import file_sha256

    out = tmp_path_factory.mktemp("v2") / "model_repo"
    shutil.copytree(tiny_repo, out)
    manifest = load_manifest(out)
    raw = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    for entry, stored in zip(manifest.models, raw["models"], strict=True):
        if entry.role != "captioner_step":
            continue
        path = entry.path(out)
        onnx.save(without_state_gather(onnx.load(str(path))), str(path))
        stored["inputs"] = [i for i in stored["inputs"] if i["name"] not in ("state_new", "state_index")]
        old = entry.model_copy(
            update={"inputs": [i for i in entry.inputs if i.name in {s["name"] for s in stored["inputs"]}]}
        )
        (out / entry.name / "config.pbtxt").write_text(
            config_pbtxt(old, digest=file_sha256(path)), encoding="utf-8"
        )
    (out / MANIFEST_NAME).write_text(json.dumps(raw, indent=2), encoding="utf-8")
    return out


def test_the_gather_is_exact_for_any_pool(tiny_repo: Path) -> None:
    path = tiny_repo / "butd_step" / "1" / "model.onnx"
    v3 = onnx.load(str(path))
    assert gathers_state(v3), "a build writes v3 steps"
    v2 = without_state_gather(v3)
    cpu = ["CPUExecutionProvider"]
    new_session = ort.InferenceSession(v3.SerializeToString(), providers=cpu)
    old_session = ort.InferenceSession(v2.SerializeToString(), providers=cpu)
    dims = {t.name: t.dims for t in load_manifest(tiny_repo).model("butd_step").inputs}
    rng = np.random.default_rng(5)
    s, (m, d) = dims["state"][1], dims["memory"][1:]
    for pooled, new, rows in ((0, 4, 4), (6, 0, 9), (5, 3, 7), (1, 1, 1)):
        pool = rng.standard_normal((pooled, s)).astype(np.float32)
        fresh = rng.standard_normal((new, s)).astype(np.float32)
        index = rng.integers(0, pooled + new, rows).astype(np.int64)
        feed = {
            "memory": rng.standard_normal((2, m, d)).astype(np.float32),
            "image_index": rng.integers(0, 2, rows).astype(np.int64),
            "tokens": rng.integers(4, 20, (rows, 1)).astype(np.int64),
            "length": np.ones(rows, dtype=np.int64),
        }
        got = new_session.run(None, {**feed, "state": pool, "state_new": fresh, "state_index": index})
        want = old_session.run(None, {**feed, "state": np.concatenate([pool, fresh])[index]})
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)


def test_a_graph_it_cannot_extend_is_refused(tiny_repo: Path) -> None:
    v3 = onnx.load(str(tiny_repo / "butd_step" / "1" / "model.onnx"))
    with pytest.raises(ValueError, match="already gathers"):
        add_state_gather(v3)
    encoder = onnx.load(str(tiny_repo / "visual_encoder" / "1" / "model.onnx"))
    with pytest.raises(ValueError, match="no state input"):
        add_state_gather(encoder)


def test_a_v2_repository_serves_the_same_captions_and_upgrades_once(
    tiny_repo: Path, v2_repo: Path, tmp_path: Path
) -> None:
    def captions(repo: Path) -> list[list[list[list[int]]]]:
        manifest = load_manifest(repo)
        vocab = Vocabulary.load(repo / manifest.vocabulary.file)

        async def run() -> list[list[list[list[int]]]]:
            backend = OnnxRuntimeBackend(repo, manifest, threads=1, device="cpu")
            engine = CaptionEngine(backend, manifest, vocab, Settings(repo=repo, intra_op_threads=1))
            try:
                cases = [
                    (images(manifest, 1 + i % 3, seed=i), engine.resolve(**o)) for i, o in enumerate(MIXED)
                ]
                outs = await asyncio.gather(*(engine.caption(x, p, timeout_s=120) for x, p in cases))
            finally:
                await engine.close()
                await backend.close()
            return [tokens(out) for out in outs]

        return asyncio.run(run())

    old = load_manifest(v2_repo)
    assert not any("state_index" in {i.name for i in old.model(c.step).inputs} for c in old.captioners)
    assert captions(v2_repo) == captions(tiny_repo), "the host gather and the graph's give the same search"
    upgraded = tmp_path / "model_repo"
    shutil.copytree(v2_repo, upgraded)
    assert sorted(upgrade_repository(upgraded)) == sorted(c.step for c in old.captioners)
    assert upgrade_repository(upgraded) == [], "a second run changes nothing"
    manifest = load_manifest(upgraded)
    for cap in manifest.captioners:
        assert [i.name for i in manifest.model(cap.step).inputs][-3:] == ["state", "state_new", "state_index"]
        assert 'name: "state_index"' in (upgraded / cap.step / "config.pbtxt").read_text(encoding="utf-8")
        assert gathers_state(onnx.load(str(upgraded / cap.step / "1" / "model.onnx")))
    assert captions(upgraded) == captions(tiny_repo)
