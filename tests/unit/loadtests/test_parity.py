"""The GPU check's parity figure (``lab/compcap_lab/gpu/parity.py``): max |CPU − CUDA| relative to the CPU
output's scale, per output and over a model's calls; and the padded tokenizer of the real-size snapshot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compcap_lab.gpu.check import spread
from compcap_lab.gpu.parity import float_outputs, relative_max_diff, worst_output


def test_relative_to_the_outputs_scale() -> None:
    cpu = np.array([[1.0, -4.0], [2.0, 0.5]], dtype=np.float32)  # scale 4
    cuda = cpu + np.array([[0.0, 0.0], [0.002, 0.0]], dtype=np.float32)
    assert relative_max_diff(cpu, cuda) == pytest.approx(0.002 / 4.0, rel=1e-3)


def test_equal_and_empty_outputs_differ_by_nothing() -> None:
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    assert relative_max_diff(x, x.copy()) == 0.0
    assert relative_max_diff(np.zeros((0, 5)), np.zeros((0, 5))) == 0.0
    assert relative_max_diff(np.zeros(3), np.zeros(3)) == 0.0


def test_any_shape_and_dtype_computed_in_float64() -> None:
    ref = np.full((2, 3, 4), 1e4, dtype=np.float16)
    got = ref.astype(np.float32) + 1.0
    assert relative_max_diff(ref, got) == pytest.approx(1e-4)
    assert relative_max_diff(np.array([3, 4], dtype=np.int64), np.array([3, 5])) == pytest.approx(0.25)


def test_a_difference_on_a_zero_output_is_infinite() -> None:
    assert math.isinf(relative_max_diff(np.zeros(4), np.array([0, 0, 1e-9, 0])))


def test_non_finite_values_must_match_exactly() -> None:
    ref = np.array([-np.inf, 1.0, np.nan])  # log-probs of a banned word are -inf
    assert relative_max_diff(ref, ref.copy()) == 0.0
    assert math.isinf(relative_max_diff(ref, np.array([-1e30, 1.0, np.nan])))
    assert math.isinf(relative_max_diff(ref, np.array([-np.inf, 1.0, 0.0])))
    assert relative_max_diff(ref, np.array([-np.inf, 1.5, np.nan])) == pytest.approx(0.5)


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        relative_max_diff(np.zeros((2, 3)), np.zeros((3, 2)))


def test_the_worst_output_over_calls() -> None:
    calls = [
        {"logprobs": np.array([[-1.0, -2.0]]), "state_out": np.array([[1.0]])},
        {"logprobs": np.array([[-1.0, -8.0]]), "state_out": np.array([[2.0]])},
    ]
    other = [
        {"logprobs": np.array([[-1.0, -2.0]]), "state_out": np.array([[1.001]])},  # 1e-3
        {"logprobs": np.array([[-1.0, -8.08]]), "state_out": np.array([[2.0]])},  # 0.08 / 8 = 1e-2
    ]
    worst, where = worst_output(calls, other)
    assert (round(worst, 6), where) == (0.01, "logprobs")
    assert worst_output([], []) == (0.0, "")
    with pytest.raises(ValueError, match="outputs differ"):
        worst_output(calls[:1], [{"logprobs": calls[0]["logprobs"]}])
    with pytest.raises(ValueError, match="calls"):
        worst_output(calls, other[:1])


def test_only_float_outputs_are_compared() -> None:
    out = {
        "top_logprobs": np.zeros((2, 3), np.float32),
        "top_tokens": np.zeros((2, 3), np.int64),
        "eos_logprob": np.zeros(2, np.float16),
    }
    assert sorted(float_outputs(out)) == ["eos_logprob", "top_logprobs"]


def test_spread_keeps_the_first_and_last_calls() -> None:
    assert spread(list(range(10)), 3) == [0, 4, 9]
    assert spread([1, 2], 5) == [1, 2]


def test_the_padded_tokenizer_has_gpt2s_size_and_decodes_its_padding() -> None:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from compcap_lab.snapshots.tokenizer import GPT2_VOCAB, bpe

    tokenizer = bpe(GPT2_VOCAB)
    assert len(tokenizer) == GPT2_VOCAB == 50257
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<pad>", "<unk>"]
    ids = tokenizer("a black cat on the sofa")["input_ids"]
    assert max(ids) < 120  # the trained tokens encode; the padding is never produced
    assert tokenizer.decode([GPT2_VOCAB - 1]).strip().startswith("unused")
