"""The kv step's pure parts: how a call's rows are laid out by image (``RowSlots``), which decoders it
takes apart, and that its folded cross-attention is the transformers module's on the whole prefix (the
graph's parity over a beam decode is tested in tests/integration/test_hf_kv_step.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export.hf.decoder_layers import BlipTextLayers, Gpt2Layers, decoder_layers
from export.hf.kv_step import KeyValueStep, RowSlots
from export.hf.step import CrossAttentionStep


def test_rows_are_laid_out_by_image() -> None:
    # rows of images 2, 0, 2, 1, 2 over 3 images: image 2 has the most rows (3), so 3 slots per image
    slots = RowSlots.of(torch.tensor([2, 0, 2, 1, 2]), 3)
    assert slots.slot.tolist() == [6, 0, 7, 3, 8]  # image · 3 + the row's rank among its image's rows
    assert slots.row.tolist() == [1, 0, 0, 3, 0, 0, 0, 2, 4]
    assert slots.filled.view(-1).tolist() == [1, 0, 0, 1, 0, 0, 1, 1, 1]
    assert all(slots.row[s] == n for n, s in enumerate(slots.slot.tolist()))


def test_an_image_without_rows_keeps_empty_slots() -> None:
    slots = RowSlots.of(torch.tensor([0, 0, 2]), 3)  # image 1 has no row in this call
    assert slots.slot.tolist() == [0, 1, 4]
    assert slots.filled.view(-1).tolist() == [1, 1, 0, 0, 1, 0]


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=4, n_positions=16)
    config.add_cross_attention = True
    model = GPT2LMHeadModel(config).eval()
    model.set_attn_implementation("eager")  # the plain step reads the cross-attention weights
    return model


def test_only_decoders_it_covers_are_taken_apart() -> None:
    from transformers import BlipTextConfig, GPT2Config, GPT2LMHeadModel
    from transformers.models.blip.modeling_blip_text import BlipTextLMHeadModel

    assert isinstance(decoder_layers(_gpt2()), Gpt2Layers)
    plain = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=4))
    assert decoder_layers(plain) is None  # no cross-attention: nothing to caption an image with
    blip = BlipTextLMHeadModel(
        BlipTextConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=32, encoder_hidden_size=24)
    )  # fmt: skip
    layers = decoder_layers(blip)
    assert isinstance(layers, BlipTextLayers) and layers.encoder_dim == 24
    with pytest.raises(ValueError, match="slots"):
        KeyValueStep(layers, 1)


def test_its_step_is_the_modules_on_the_whole_prefix() -> None:
    """Two calls: images joining with their zero states, then every row continuing from a parent of its
    own image (rows shuffled, prefixes of one more token); log-probs and attention as the transformers
    decoder's on the whole prefixes."""
    decoder = _gpt2()
    step, plain = KeyValueStep(Gpt2Layers(decoder), 6), CrossAttentionStep(decoder)
    gen = torch.Generator().manual_seed(1)
    memory = torch.randn(2, 5, 16, generator=gen)
    image = torch.tensor([0, 1, 1])
    first = torch.zeros(3, 1, dtype=torch.int64)
    with torch.no_grad():
        logprobs, state, attention = step(
            memory, image, first, torch.ones(3, dtype=torch.int64),
            torch.zeros(2, step.state_dim), torch.zeros(0, step.state_dim), torch.tensor([0, 1, 1]),
        )  # fmt: skip  # the first call: the new states passed as the pool (the contract's)
        want = plain(memory, image, first, torch.ones(3, dtype=torch.int64), torch.zeros(3, 1))
        assert torch.allclose(logprobs, want[0], atol=1e-5) and torch.allclose(attention, want[2], atol=1e-6)
        parents = torch.tensor([2, 0, 1, 2])  # rows of images 1, 0, 1, 1
        image = image[parents]
        tokens = torch.cat([first[parents], torch.tensor([[7], [3], [9], [4]])], dim=1)
        length = torch.full((4,), 2, dtype=torch.int64)
        logprobs, _, attention = step(
            memory, image, tokens, length, state, torch.zeros(0, step.state_dim), parents
        )
        want = plain(memory, image, tokens, length, torch.zeros(4, 1))
    assert torch.allclose(logprobs, want[0], atol=1e-5) and torch.allclose(attention, want[2], atol=1e-6)


def test_fusion_forms_are_checked(tmp_path: Path) -> None:
    from export.hf.fusion import FusionTiming, choose_fused

    path = tmp_path / "m" / "1" / "model.onnx"
    with pytest.raises(ValueError, match="form"):
        choose_fused(path, {}, "gpt2", 4, 16, "sometimes", 1e-4)  # type: ignore[arg-type]
    off = choose_fused(path, {}, "gpt2", 4, 16, "off", 1e-4)
    assert not off.kept and off.summary() == "m: fusions none: not tried (--fuse off)"
    timed = FusionTiming("m", {"SkipLayerNormalization": 4}, 10.0, 8.0, 2e-6, True)
    assert timed.summary() == (
        "m: fusions SkipLayerNormalization 4: 10.0 -> 8 ms per call (x1.25), max abs diff 2.0e-06: kept fused"
    )
