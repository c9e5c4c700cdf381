"""The null backend (``COMPCAP_BACKEND=null``): every model of the tiny repository answers with the
shapes its manifest declares (a -1 resolved from the inputs), its log-prob rows end captions through the
real engine at beam 1 and 5 within the length bounds, a top-k step's outputs agree with its whole rows,
and a version 3 step gathers its rows' states (``state``, ``state_new``, ``state_index``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.backends.base import BackendError, backend_devices, infer_outputs
from service.backends.null import END_WORDS, NullBackend, end_words, logprob_table
from service.backends.registry import make_backend
from service.engine.engine import CaptionEngine
from service.engine.runner import ModelRunner, StepInput
from service.engine.state_rows import StateRows
from service.manifest import Manifest, ModelEntry, TensorSpec, load_manifest
from service.metrics import Metrics
from service.settings import Settings
from service.text.vocabulary import Vocabulary


@pytest.fixture(scope="module")
def manifest(tiny_repo: Path) -> Manifest:
    return load_manifest(tiny_repo)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def feed(entry: ModelEntry, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs of ``entry`` for ``n`` items (rows), each -1 dim a small size."""
    out: dict[str, np.ndarray] = {}
    for spec in entry.inputs:
        dims = [d if d > 0 else 3 for d in spec.dims]
        shape = (n, *dims) if entry.max_batch_size else tuple([n, *dims[1:]] if dims else [n])
        if spec.dtype == "UINT8":
            out[spec.name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif spec.dtype == "INT64":
            out[spec.name] = rng.integers(1, 4, shape).astype(np.int64)
        else:
            out[spec.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def expected_shape(
    entry: ModelEntry, spec: TensorSpec, n: int, inputs: dict[str, np.ndarray]
) -> tuple[int, ...]:
    dims = spec.dims if entry.max_batch_size else spec.dims[1:]
    resolved = []
    for axis, d in enumerate(dims):
        if d > 0:
            resolved.append(d)
        elif spec.name == "attention":  # [N, M]: the memory's slots
            resolved.append(inputs["memory"].shape[1])
        elif spec.name == "state_out":  # [N, S]: the states' width
            resolved.append(inputs["state"].shape[1])
        else:
            raise AssertionError(f"{entry.name}.{spec.name}: dim {axis} unresolved in this test")
    return (n, *resolved)


def test_every_model_answers_its_manifest_shapes(manifest: Manifest) -> None:
    backend = NullBackend(manifest)
    rng = np.random.default_rng(0)
    roles = set()
    for entry in manifest.models:
        n = 4
        inputs = feed(entry, n, rng)
        if entry.role == "captioner_step":  # v3: N rows gathered from 2 pooled + 3 new states
            width = inputs["state"].shape[1]
            inputs["state"] = np.zeros((2, width), np.float32)
            inputs["state_new"] = np.zeros((3, width), np.float32)
            inputs["state_index"] = np.array([4, 0, 1, 3], dtype=np.int64)
            cap = next(c for c in manifest.captioners if c.step == entry.name)
            inputs["memory"] = np.zeros((2, *cap.memory_dims), np.float32)
            inputs["image_index"] = np.array([0, 0, 1, 1], dtype=np.int64)
            inputs["length"] = np.ones(n, dtype=np.int64)
        out = run(backend.infer(entry.name, inputs))
        assert list(out) == [o.name for o in entry.outputs]
        for spec in entry.outputs:
            assert out[spec.name].shape == expected_shape(entry, spec, n, inputs), (entry.name, spec.name)
            assert out[spec.name].dtype == {"FP32": np.float32, "INT64": np.int64}[spec.dtype]
        if entry.role.startswith("ranker"):
            np.testing.assert_allclose(np.linalg.norm(out["embedding"], axis=1), 1.0, rtol=1e-5)
        roles.add(entry.role)
    assert roles == {"visual_encoder", "captioner_init", "captioner_step", "ranker_image", "ranker_text"}
    # only the outputs asked for; errors as the embedded backend's
    step = manifest.captioners[0].step
    inputs = feed(manifest.model(step), 2, rng)
    inputs.update(state_new=inputs["state"], state_index=np.arange(2), state=inputs["state"][:0])
    assert list(run(infer_outputs(backend, step, inputs, ["state_out"]))) == ["state_out"]
    with pytest.raises(BackendError) as err:
        run(backend.infer("no_such_model", {}))
    assert err.value.reason == "unknown_model"
    with pytest.raises(BackendError) as err:
        run(backend.infer(step, inputs, outputs=["top_tokens"]))
    assert err.value.reason == "bad_input"
    with pytest.raises(BackendError) as err:
        run(backend.infer(step, {"tokens": inputs["tokens"]}))
    assert err.value.reason == "bad_input"


def test_the_table_ends_captions_after_its_words() -> None:
    table = logprob_table(50, 4, special=(0, 1, 3), eos=2, seed=0)
    assert table.shape[:2] == (5, 8) and table.dtype == np.float32
    np.testing.assert_allclose(np.exp(table.astype(np.float64)).sum(axis=-1), 1.0, atol=1e-6)
    assert (table[:4].argmax(axis=-1) != 2).all() and (table[4].argmax(axis=-1) == 2).all()
    assert (table[..., [0, 1, 3]] < -25).all()
    assert not np.array_equal(table[0, 0], table[0, 1])  # the variants (last tokens) differ


@pytest.mark.parametrize("beam", [1, 5])
def test_captions_end_through_the_engine(tiny_repo: Path, manifest: Manifest, beam: int) -> None:
    async def go() -> None:
        engine = await CaptionEngine.from_settings(Settings(repo=tiny_repo, backend="null"))
        try:
            images = np.zeros((3, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)
            for cap in manifest.captioners:
                words = end_words(cap)
                assert words == min(END_WORDS, cap.max_length - 1)
                out = await engine.caption(images, engine.resolve(model=cap.name, beam_size=beam))
                for per_image in out.results:
                    assert len(per_image) == beam
                    assert {len(c.tokens) for c in per_image} == {words}
                    assert all(np.isfinite(c.logprob) for c in per_image)
                if beam > 1:  # the beams differ
                    assert len({tuple(c.tokens) for c in out.results[0]}) == beam
                short = await engine.caption(
                    images[:1], engine.resolve(model=cap.name, beam_size=beam, max_length=4)
                )
                assert {len(c.tokens) for c in short.results[0]} == {4}
        finally:
            await engine.close()

    run(go())


def test_factory_builds_it_and_says_no_device(tiny_repo: Path, manifest: Manifest) -> None:
    metrics = Metrics()
    backend = run(make_backend(Settings(repo=tiny_repo, backend="null"), manifest, metrics))
    assert isinstance(backend, NullBackend)
    assert backend_devices(backend) == {m.name: "none" for m in manifest.models}
    assert (
        metrics.model_device.labels(
            model=manifest.models[0].name, device="none", provider="null"
        )._value.get()
        == 1
    )


def with_top_k(manifest: Manifest) -> Manifest:
    """``manifest`` with every step declaring ``top_k`` and its outputs (as ``export.packaging.topk`` adds
    them)."""
    models = []
    for entry in manifest.models:
        if entry.role == "captioner_step":
            entry = entry.model_copy(
                update={
                    "inputs": [*entry.inputs, TensorSpec(name="top_k", dtype="INT64", dims=[1])],
                    "outputs": [
                        *entry.outputs,
                        TensorSpec(name="top_logprobs", dtype="FP32", dims=[-1, -1]),
                        TensorSpec(name="top_tokens", dtype="INT64", dims=[-1, -1]),
                        TensorSpec(name="eos_logprob", dtype="FP32", dims=[-1]),
                    ],
                }
            )
        models.append(entry)
    return manifest.model_copy(update={"models": models})


def test_top_k_outputs_agree_with_the_whole_rows(manifest: Manifest) -> None:
    topped = with_top_k(manifest)
    backend = NullBackend(topped)
    runner = ModelRunner(backend, topped)
    cap = manifest.captioners[0]
    step = topped.model(cap.step)
    rng = np.random.default_rng(1)
    n = 12
    for k in (1, 5, 80):  # 80: more than the rows kept sorted (64)
        inputs = feed(step, n, rng)
        width = inputs["state"].shape[1]
        counts = rng.integers(0, END_WORDS + 2, n).astype(np.float32)
        inputs.update(state=np.zeros((0, width), np.float32), state_new=np.zeros((n, width), np.float32))
        inputs["state_new"][:, 0] = counts
        inputs.update(state_index=np.arange(n), top_k=np.array([k]), tokens=rng.integers(4, 100, (n, 1)))
        out = run(backend.infer(cap.step, inputs))
        eos = manifest.vocabulary.eos_id
        k_eff = min(k, runner.vocab_size(cap.name))
        assert out["top_tokens"].shape == (n, k_eff) and out["top_logprobs"].shape == (n, k_eff)
        np.testing.assert_array_equal(
            out["top_logprobs"], np.take_along_axis(out["logprobs"], out["top_tokens"], axis=1)
        )
        np.testing.assert_array_equal(out["top_logprobs"][:, 0], out["logprobs"].max(axis=1))
        assert (np.diff(out["top_logprobs"], axis=1) <= 0).all()
        np.testing.assert_array_equal(out["eos_logprob"], out["logprobs"][:, eos])
        # the end token is the best word once the row has its words
        assert ((out["top_tokens"][:, 0] == eos) == (counts >= end_words(cap))).all()


def test_a_top_k_step_decodes_as_whole_rows(tiny_repo: Path, manifest: Manifest) -> None:
    vocab = Vocabulary.load(tiny_repo / manifest.vocabulary.file)
    settings = Settings(repo=tiny_repo, backend="null")
    images = np.zeros((2, manifest.image.height, manifest.image.width, 3), dtype=np.uint8)

    async def captions(m: Manifest) -> list[list[tuple[int, ...]]]:
        engine = CaptionEngine(NullBackend(m), m, vocab, settings)
        try:
            out = await engine.caption(images, engine.resolve(beam_size=5, rerank=False))
            return [[tuple(c.tokens) for c in per_image] for per_image in out.results]
        finally:
            await engine.close()

    assert run(captions(with_top_k(manifest))) == run(captions(manifest))


def test_v3_state_rows_and_an_older_step(manifest: Manifest) -> None:
    backend = NullBackend(manifest)
    cap = manifest.captioners[0]
    assert manifest.model(cap.step).gathers_state and cap.reads == "last_token"
    runner = ModelRunner(backend, manifest)
    width, (slots, dm) = cap.state_dim, cap.memory_dims
    memory = np.zeros((2, slots, dm), np.float32)
    tokens = np.array([[1, 7], [1, 9], [1, 9]], dtype=np.int64)
    pool = np.zeros((4, width), np.float32)
    pool[:, 0] = [3, 5, 6, 7]
    new = np.zeros((2, width), np.float32)  # two images' initial states: no words yet
    states = StateRows(pool, new, np.array([1, 4, 3], dtype=np.int64))
    rows = StepInput(memory, np.array([0, 1, 1]), tokens, np.array([2, 2, 2]), states)
    out = run(runner.step(cap.name, rows))
    assert out.logprobs.shape == (3, runner.vocab_size(cap.name))
    assert out.state.shape == (3, width) and out.attention is not None and out.attention.shape == (3, slots)
    np.testing.assert_array_equal(out.state[:, 0], [6, 1, 8])  # each row's words so far, plus this one
    assert not out.state[:, 1:].any()
    # the same rows from a step before v3 (its state gathered on the host): the same outputs
    step = manifest.model(cap.step)
    old_step = step.model_copy(
        update={"inputs": [i for i in step.inputs if i.name not in ("state_new", "state_index")]}
    )
    old = manifest.model_copy(
        update={"models": [old_step if m.name == cap.step else m for m in manifest.models]}
    )
    older = ModelRunner(NullBackend(old), old)
    again = run(older.step(cap.name, rows))
    np.testing.assert_array_equal(again.logprobs, out.logprobs)
    np.testing.assert_array_equal(again.state, out.state)
