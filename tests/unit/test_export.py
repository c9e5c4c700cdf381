"""ONNX export parity (torch vs onnxruntime ≤ 1e-4) on random-weight models of the tiny preset's widths,
and Triton config generation validated by Triton's ModelConfig protobuf."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export.models.butr import BUTR, not_negatives, ranking_loss
from export.models.vsepp import VSEPP
from export.onnx import GraphSpec, export_graph, parity
from export.repo import config_pbtxt, parse_config
from service.manifest import ModelEntry, TensorSpec

V, R, D = 30, 36, 16


@pytest.fixture(scope="module")
def butr() -> BUTR:
    torch.manual_seed(0)
    return BUTR(V, D, word_dim=8, hidden_dim=12, joint_dim=10, attention_dim=6).eval()


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
    export_graph(butr, butr.step, GraphSpec(inputs(4, 3), ["logprobs", "state_out", "attention"], dyn), path)
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
        model = SAT(V, D, word_dim=8, hidden_dim=12, attention_dim=6)
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
