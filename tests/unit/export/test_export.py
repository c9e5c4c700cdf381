"""ONNX export parity (torch vs onnxruntime ≤ 1e-4) on random-weight models of the tiny preset's widths,
and Triton config generation validated by Triton's ModelConfig protobuf."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export.models.butr import BUTR, not_negatives, ranking_loss
from export.models.lstm_sizes import LSTMSizes
from export.models.vsepp import VSEPP
from export.packaging.onnx import GraphSpec, export_graph, parity
from export.packaging.triton_repo import config_pbtxt, parse_config
from service.manifest import ModelEntry, TensorSpec

V, R, D = 30, 36, 16


@pytest.fixture(scope="module")
def butr() -> BUTR:
    torch.manual_seed(0)
    return BUTR(LSTMSizes(V, D, word_dim=8, hidden_dim=12, attention_dim=6), joint_dim=10).eval()


def test_step_matches_teacher_forcing(butr: BUTR) -> None:
    regions = torch.rand(2, R, D)
    tokens = torch.randint(4, V, (2, 6))
    tokens[:, 0] = 1
    full = butr(regions, tokens)
    memory, state = butr.init(regions)
    index = torch.tensor([0, 1])
    for t in range(5):
        logprobs, state, attention = butr.step(memory, index, tokens, torch.tensor([t + 1, t + 1]), state)
        assert torch.allclose(logprobs, full[:, t], atol=1e-5)
        assert torch.allclose(attention.sum(-1), torch.ones(2))


def test_step_onnx_parity(butr: BUTR, tmp_path: Path) -> None:
    memory, _ = butr.init(torch.rand(3, R, D))

    def inputs(n: int, t: int) -> dict[str, torch.Tensor]:
        tokens = torch.randint(4, V, (n, t))
        return {
            "memory": memory,
            "image_index": torch.randint(0, 3, (n,)),
            "tokens": tokens,
            "length": torch.randint(1, t + 1, (n,)),
            "state": torch.randn(n, butr.state_dim),
        }

    dyn = {
        "memory": {0: "i"},
        "image_index": {0: "n"},
        "tokens": {0: "n", 1: "t"},
        "length": {0: "n"},
        "state": {0: "n"},
    }
    path = tmp_path / "step.onnx"
    butr.train()
    export_graph(butr, butr.step, GraphSpec(inputs(4, 3), ["logprobs", "state_out", "attention"], dyn), path)
    assert not any(m.training for m in butr.modules())  # export leaves the model in eval mode
    for n, t in ((1, 1), (9, 5)):  # other row counts and prefix lengths than the traced ones
        assert parity(butr, butr.step, path, inputs(n, t)) <= 1e-4


@pytest.mark.parametrize("ranker", ["butr", "vsepp"])
def test_ranker_text_onnx_parity_and_padding_invariance(butr: BUTR, ranker: str, tmp_path: Path) -> None:
    model = butr if ranker == "butr" else VSEPP(V, D, 8, 12, 10).eval()
    tokens = torch.randint(4, V, (3, 7))
    tokens[:, 0] = 1
    length = torch.tensor([[3], [7], [1]])
    path = tmp_path / "text.onnx"
    spec = GraphSpec(
        {"tokens": tokens, "length": length}, ["embedding"], {"tokens": {0: "b", 1: "t"}, "length": {0: "b"}}
    )
    export_graph(model, model.text_embedding, spec, path)
    assert (
        parity(model, model.text_embedding, path, {"tokens": tokens[:, :4], "length": length.clamp(max=4)})
        <= 1e-4
    )
    padded = tokens.clone()
    padded[0, 3:] = 0  # what follows the length must not change the embedding
    assert torch.allclose(
        model.text_embedding(padded, length), model.text_embedding(tokens, length), atol=1e-6
    )


def test_ranking_loss_prefers_matching_pairs() -> None:
    emb = torch.nn.functional.normalize(torch.randn(6, 10), dim=-1)
    tokens = torch.arange(6).unsqueeze(1).repeat(1, 3)
    excluded = not_negatives(torch.arange(6), tokens)
    for hardest in (1.0, 0.0, 0.5):
        matched = ranking_loss(emb, emb, excluded, 0.2, hardest)
        assert matched < ranking_loss(emb, emb.roll(1, 0), excluded, 0.2, hardest)
    one_image = not_negatives(torch.zeros(6, dtype=torch.long), tokens)  # no negatives at all: no loss
    assert float(ranking_loss(emb, emb.roll(1, 0), one_image, 0.2)) == 0.0
    same_text = not_negatives(torch.arange(6), torch.zeros(6, 3, dtype=torch.long))  # duplicate captions
    assert same_text.all() and float(ranking_loss(emb, emb.roll(1, 0), same_text, 0.2)) == 0.0


def test_config_pbtxt_parses_with_triton_protobuf() -> None:
    step = ModelEntry(
        name="butr_step",
        role="captioner_step",
        owner="butr",
        max_batch_size=0,
        inputs=[TensorSpec(name="tokens", dtype="INT64", dims=[-1, -1])],
        outputs=[TensorSpec(name="logprobs", dtype="FP32", dims=[-1, V])],
    )
    parsed = parse_config(config_pbtxt(step))
    assert parsed.platform == "onnxruntime_onnx" and parsed.max_batch_size == 0
    assert not parsed.HasField("dynamic_batching")
    assert parsed.instance_group[0].kind == parsed.instance_group[0].KIND_GPU
    encoder = step.model_copy(update={"name": "visual_encoder", "max_batch_size": 64})
    parsed = parse_config(config_pbtxt(encoder))
    assert parsed.HasField("dynamic_batching") and list(parsed.dynamic_batching.preferred_batch_size) == [
        8,
        16,
        32,
    ]
    with pytest.raises(Exception, match="bogus"):
        parse_config(config_pbtxt(step) + "bogus_field: 1\n")


@pytest.mark.parametrize("name", ["sat", "transformer", "m2"])
def test_zoo_captioner_step_parity_and_teacher_forcing(name: str, tmp_path: Path) -> None:
    from export.models.sat import SAT
    from export.models.transformer import TransformerCaptioner

    torch.manual_seed(1)
    model: torch.nn.Module
    if name == "sat":
        model = SAT(LSTMSizes(V, D, word_dim=8, hidden_dim=12, attention_dim=6))
    else:
        model = TransformerCaptioner(
            V, D, R, dim=16, heads=2, layers=3, memory_slots=4 if name == "m2" else 0, meshed=name == "m2"
        )
    model.eval()
    regions = torch.rand(3, R, D)
    tokens = torch.randint(4, V, (3, 6))
    tokens[:, 0] = 1
    full = model(regions, tokens)
    memory, state = model.init(regions)
    index = torch.tensor([0, 1, 2])
    for t in range(1, 5):  # the contract step reproduces teacher forcing
        logprobs, next_state, attention = model.step(memory, index, tokens[:, :t], torch.full((3,), t), state)
        assert torch.allclose(logprobs, full[:, t - 1], atol=1e-5)
        assert torch.allclose(attention.sum(-1), torch.ones(3), atol=1e-5)
        state = next_state
    rows = torch.tensor([2, 0, 0, 1])
    inputs = {
        "memory": memory,
        "image_index": rows,
        "tokens": tokens[rows, :5],
        "length": torch.tensor([5, 2, 3, 1]),
        "state": state[rows],
    }
    dyn = {
        "memory": {0: "i"},
        "image_index": {0: "n"},
        "tokens": {0: "n", 1: "t"},
        "length": {0: "n"},
        "state": {0: "n"},
    }
    path = tmp_path / f"{name}_step.onnx"
    export_graph(model, model.step, GraphSpec(inputs, ["logprobs", "state_out", "attention"], dyn), path)
    other = {
        **inputs,
        "image_index": rows[:2],
        "tokens": tokens[rows[:2], :3],
        "length": torch.tensor([3, 1]),
        "state": state[rows[:2]],
    }
    assert parity(model, model.step, path, inputs) <= 1e-4
    assert parity(model, model.step, path, other) <= 1e-4


def _selection_data(n: int, seed: int) -> tuple[torch.Tensor, list[list[str]]]:
    """Random regions of the tiny preset's width whose captions follow two of their features."""
    g = torch.Generator().manual_seed(seed)
    regions = torch.randn(n, R, D, generator=g)
    captions = []
    for r in regions:
        colour = "red" if r[0, 0] > 0 else "blue"
        noun = "cat" if r[1, 0] > 0 else "dog"
        captions.append(
            [f"a {colour} {noun} on the grass", f"a {noun} that is {colour}", f"the {colour} {noun}"]
        )
    return regions, captions


def _tiny_butd(vocab_size: int) -> BUTR:
    from export.presets import get_preset

    p = get_preset("tiny")
    torch.manual_seed(0)
    return BUTR(LSTMSizes.of(vocab_size, D, p), p.joint_dim)


def test_model_selection_keeps_the_best_val_epoch() -> None:
    """With the tiny preset and a real val set: the recorded epoch is the argmax of the recorded val
    BLEU-4 curve, and the returned weights are that epoch's (re-evaluating gives the recorded BLEU-4)."""
    from dataclasses import replace

    import numpy as np

    from compcap_lab.training.train import Validation, train_captioner, validation_bleu4
    from export.presets import get_preset
    from service.text.vocabulary import Vocabulary

    p = replace(get_preset("tiny"), caption_epochs=4, patience=4, learning_rate=1e-2)
    regions, captions = _selection_data(160, 0)
    val_regions, val_refs = _selection_data(40, 1)
    vocab = Vocabulary.build(c for caps in captions for c in caps)
    model = _tiny_butd(len(vocab))
    val = Validation(val_regions, val_refs)
    log = train_captioner(model, regions, captions, vocab, p, seed=0, desc="butd", val=val)
    assert log.epochs == log.max_epochs == 4 and len(log.val_bleu4) == 4 and log.val_images == 40
    assert len(set(log.val_bleu4)) > 1, "the curve should move over 4 epochs"
    assert log.selected_epoch == int(np.argmax(log.val_bleu4)) + 1
    assert validation_bleu4(model, val, vocab, p.max_length) == pytest.approx(
        log.val_bleu4[log.selected_epoch - 1], abs=1e-12
    )


def test_model_selection_stops_early_and_restores_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted val curve 0.1, 0.3, 0.2, 0.25 with patience 2: training stops after epoch 4 of 6 and
    returns the weights it had after epoch 2."""
    from dataclasses import replace

    import compcap_lab.training.train as train
    from export.presets import get_preset
    from service.text.vocabulary import Vocabulary

    curve = iter([0.1, 0.3, 0.2, 0.25, 0.9, 0.9])
    snapshots: list[dict[str, torch.Tensor]] = []

    def scripted(model: torch.nn.Module, *_: object) -> float:
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return next(curve)

    monkeypatch.setattr(train, "validation_bleu4", scripted)
    p = replace(get_preset("tiny"), caption_epochs=6, patience=2)
    regions, captions = _selection_data(64, 2)
    vocab = Vocabulary.build(c for caps in captions for c in caps)
    model = _tiny_butd(len(vocab))
    log = train.train_captioner(
        model,
        regions,
        captions,
        vocab,
        p,
        seed=0,
        desc="butd",
        val=train.Validation(regions[:8], captions[:8]),
    )
    assert (log.epochs, log.max_epochs, log.selected_epoch) == (4, 6, 2)
    assert log.val_bleu4 == [0.1, 0.3, 0.2, 0.25]
    final = model.state_dict()
    assert all(torch.equal(final[k], snapshots[1][k]) for k in final)
    assert not all(torch.equal(final[k], snapshots[3][k]) for k in final)


def test_greedy_captions_follow_the_contract_step() -> None:
    """Greedy decoding through init/step equals greedy decoding by teacher-forced forward passes."""
    from compcap_lab.training.train import greedy_captions
    from service.text.vocabulary import SPECIALS, Vocabulary

    vocab = Vocabulary((*SPECIALS, *(f"w{i}" for i in range(V - len(SPECIALS)))))
    model = _tiny_butd(V).eval()
    regions = torch.rand(3, R, D)
    texts = greedy_captions(model, regions, vocab, max_length=5, batch_size=2)
    for r, text in zip(regions, texts, strict=True):
        tokens = torch.tensor([[vocab.bos_id]])
        for _ in range(5):  # at most max_length words
            nxt = model(r[None], torch.cat([tokens, tokens[:, :1]], dim=1))[0, -1].argmax()
            tokens = torch.cat([tokens, nxt.view(1, 1)], dim=1)
            if int(nxt) == vocab.eos_id:
                break
        assert text == vocab.decode(tokens[0, 1:].tolist())
