"""Explanation maps on a real tiny repository: the attention the step observer records along the search
equals a teacher-forced decode of the same caption; the torch programs score the caption exactly as the
ONNX models do; Captum's methods behave as their definitions say (saliency is a magnitude, guided
backprop overrides every ReLU, integrated gradients are complete); the service admits at most its limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from service.api.gate import BusyError, RequestError
from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.engine import CaptionEngine
from service.engine.processors import ForceWords
from service.explain.gradients import ProgramCache, attribute, relu_calls
from service.explain.service import ExplainInput, ExplainService
from service.manifest import Manifest
from service.settings import Settings
from service.text.vocabulary import Vocabulary


def image(manifest: Manifest, seed: int) -> np.ndarray:
    h, w = manifest.image.height, manifest.image.width
    return np.random.default_rng(seed).integers(0, 256, size=(1, h, w, 3), dtype=np.uint8)


def run(tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, work):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        backend = OnnxRuntimeBackend(tiny_repo, manifest, threads=1)
        engine = CaptionEngine(backend, manifest, vocab, Settings(repo=tiny_repo, intra_op_threads=1))
        service = ExplainService(tiny_repo, manifest, vocab, max_concurrent=2)
        try:
            return await work(engine, service)
        finally:
            await engine.close()
            await backend.close()

    return asyncio.run(main())


def test_force_words_allows_only_the_next_word_at_its_own_logprob() -> None:
    force = ForceWords([5, 7], eos=2)
    logprobs = np.log(np.full((2, 9), 1 / 9, dtype=np.float32))
    out = force(np.array([[1, 5], [1, 5]]), logprobs)
    assert np.isfinite(out).sum(axis=1).tolist() == [1, 1] and out[0, 7] == logprobs[0, 7]
    assert np.isfinite(force(np.array([[1, 5, 7]]), logprobs[:1])[0, 2])  # then EOS
    with pytest.raises(ValueError, match="words"):
        ForceWords([], eos=2)


@pytest.mark.parametrize("options", [{"beam_size": 1}, {"beam_size": 5, "rerank": True}])
def test_attention_along_the_search_equals_the_forced_decode(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, options: dict[str, object]
) -> None:
    async def work(engine: CaptionEngine, service: ExplainService) -> tuple[dict, dict]:  # type: ignore[type-arg]
        params = engine.resolve(**options)
        live = await service.explain(engine, ExplainInput(image(manifest, 1), params, overlays=False))
        forced = await service.explain(
            engine, ExplainInput(image(manifest, 1), params, caption=live["caption"], overlays=False)
        )
        return live, forced

    live, forced = run(tiny_repo, manifest, vocab, work)
    assert live["source"] == "engine" and forced["source"] == "client"
    assert live["caption"] == forced["caption"] and live["words"]
    for a, b in zip(live["words"], forced["words"], strict=True):
        np.testing.assert_allclose(a["values"], b["values"], atol=1e-5)
        assert a["argmax_region"] == b["argmax_region"]
        assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-4)
    total = sum(w["logprob"] for w in live["words"])
    assert live["logprob"] <= total + 1e-4  # the caption's log-prob adds the EOS step's to the words'
    rows = np.array([w["values"] for w in live["words"]]).reshape(len(live["words"]), -1)
    np.testing.assert_allclose(rows.sum(1), 1.0, atol=1e-4)  # attention is a distribution over regions


def test_programs_score_the_caption_as_the_onnx_models_do(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary
) -> None:
    async def work(engine: CaptionEngine, service: ExplainService) -> dict:  # type: ignore[type-arg]
        params = engine.resolve(model="butd", beam_size=3)
        return await service.explain(engine, ExplainInput(image(manifest, 2), params, overlays=False))

    live = run(tiny_repo, manifest, vocab, work)
    programs = ProgramCache(tiny_repo, manifest)
    names = ["visual_encoder"] + [m for c in manifest.captioners for m in (c.init, c.step)]
    assert all(relu_calls(programs.graph(n)) == 0 for n in names)  # guided backprop sees every ReLU
    words = [vocab.index[w["word"]] for w in live["words"]]
    got = programs.attribute("butd", image(manifest, 2), words, "saliency", "regions", 1)
    np.testing.assert_allclose(got.scores, [w["logprob"] for w in live["words"]], atol=1e-4)
    assert got.values.shape[0] == len(words) and (got.values >= 0).all()  # saliency: |gradient|


def test_guided_backprop_and_integrated_gradients(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary
) -> None:
    programs = ProgramCache(tiny_repo, manifest)
    words = vocab.encode("a black dog on the grass")
    pixels = torch.from_numpy(image(manifest, 3).astype(np.float32))
    scorer = programs.scorer("butr", words, pixels=True)
    plain = attribute(scorer, pixels, "saliency", 1).values  # |gradient|
    guided = attribute(scorer, pixels, "guided_backprop", 1).values
    # through the encoder's ReLUs the guided signal is not the gradient: only positive gradients pass
    differs = np.abs(np.abs(guided) - plain).max(axis=(1, 2, 3)) / plain.max(axis=(1, 2, 3))
    assert (differs > 0.1).all(), differs
    regions = programs.graph("visual_encoder")(pixels).detach()
    ig = attribute(programs.scorer("butr", words, pixels=False), regions, "integrated_gradients", 50)
    assert ig.delta is not None and ig.gap is not None
    relative = np.abs(ig.delta) / np.abs(ig.gap)
    assert relative.mean() < 0.05, relative  # completeness: Σ attributions ≈ S_w(x) − S_w(0)
    np.testing.assert_allclose(
        ig.values.reshape(len(words), -1).sum(1), ig.gap + ig.delta, rtol=1e-3, atol=1e-4
    )


def test_the_service_validates_and_admits_at_most_its_limit(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary
) -> None:
    async def work(engine: CaptionEngine, service: ExplainService) -> None:
        params = engine.resolve()
        for spec, field in (
            (ExplainInput(image(manifest, 0), params, method="magic"), "method"),
            (ExplainInput(image(manifest, 0), params, "integrated_gradients", n_steps=10_000), "n_steps"),
            (ExplainInput(image(manifest, 0), params, caption="a zebra"), "caption"),
            (ExplainInput(image(manifest, 0), params, attribute_to="pixels"), "attribute_to"),
        ):
            with pytest.raises(RequestError) as err:
                await service.explain(engine, spec)
            assert err.value.field == field and 400 <= err.value.status < 500
        held = [service.gate.acquire() for _ in range(service.gate.limit)]
        with pytest.raises(BusyError) as busy:
            await service.explain(engine, ExplainInput(image(manifest, 0), params))
        assert busy.value.code == "too_many_explanations" and busy.value.headers["Retry-After"] == "1"
        for release in held:
            release()
        assert service.gate.held == 0
        assert (await service.explain(engine, ExplainInput(image(manifest, 0), params, overlays=False)))[
            "words"
        ]

    run(tiny_repo, manifest, vocab, work)


@pytest.mark.parametrize("captioner", ["butr", "butd"])
def test_all_words_at_once_equal_one_word_at_a_time(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, captioner: str
) -> None:
    from captum.attr import IntegratedGradients, Saliency

    programs = ProgramCache(tiny_repo, manifest)
    words = vocab.encode("a dog on the grass")
    regions = programs.graph("visual_encoder")(
        torch.from_numpy(image(manifest, 4).astype(np.float32))
    ).detach()
    scorer = programs.scorer(captioner, words, pixels=False)
    batched = attribute(scorer, regions, "saliency").values
    ig = attribute(scorer, regions, "integrated_gradients", 10)
    for t in (0, 3):
        alone = Saliency(scorer).attribute(regions, target=t, abs=True)[0].numpy()
        np.testing.assert_allclose(batched[t], alone, rtol=1e-5, atol=1e-9)
        one, delta = IntegratedGradients(scorer).attribute(
            regions, baselines=torch.zeros_like(regions), target=t, n_steps=10, return_convergence_delta=True
        )
        np.testing.assert_allclose(ig.values[t], one[0].numpy(), rtol=1e-4, atol=1e-8)
        assert ig.delta is not None and ig.delta[t] == pytest.approx(float(delta[0]), abs=1e-5)


def test_a_repository_without_its_programs_answers_501_for_gradients_only(
    tiny_repo: Path, manifest: Manifest, vocab: Vocabulary, tmp_path: Path
) -> None:
    bare = ExplainService(tmp_path, manifest, vocab)  # the manifest names programs; no files under tmp_path
    from service.engine.params import SearchParams

    spec = ExplainInput(image(manifest, 0), SearchParams(model="butr"), method="saliency")
    with pytest.raises(RequestError) as err:
        bare.check(spec)
    assert (
        err.value.status == 501 and err.value.code == "programs_missing" and "make build" in err.value.message
    )
    assert (
        bare.check(ExplainInput(image(manifest, 0), SearchParams(model="butr"))) is None
    )  # attention is fine
