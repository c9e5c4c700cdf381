"""The captioner step contract written once (``export.models.step_contract``): ``step`` hands the five
inputs, in the graph's order, to the captioner's ``decode_step``; version 3's inputs gather each row's
state from the pool and the new images' states."""

from __future__ import annotations

import inspect

import pytest
import torch

from export.models.butr import BUTR
from export.models.sat import SAT
from export.models.step_contract import CaptionerStep, PooledInputs, StepInputs, StepModule, StepOutputs
from export.models.transformer import TransformerCaptioner


class Echo(StepModule):
    """A step that hands back what it was given, to see the order the contract passes."""

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        self.seen = inputs
        return inputs.tokens, inputs.state, inputs.memory


def test_step_and_forward_name_the_five_inputs_in_the_graph_order() -> None:
    names = list(inspect.signature(CaptionerStep.step).parameters)[1:]
    assert names == list(StepInputs._fields) == ["memory", "image_index", "tokens", "length", "state"]
    tensors = [torch.full((1,), float(k)) for k in range(5)]
    echo = Echo()
    echo(*tensors)
    assert [int(t.item()) for t in echo.seen] == [0, 1, 2, 3, 4]
    echo.step(*tensors[::-1])
    assert [int(t.item()) for t in echo.seen] == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("model", [BUTR, SAT, TransformerCaptioner])
def test_trained_captioners_write_only_their_decoding(model: type) -> None:
    assert issubclass(model, CaptionerStep)
    assert "step" not in vars(model) and "decode_step" in vars(model)


def test_a_captioner_without_its_decoding_is_refused_by_name() -> None:
    tensors = [torch.zeros(1)] * 5
    with pytest.raises(NotImplementedError, match="StepModule does not decode a step"):
        StepModule()(*tensors)


def test_version_3_gathers_each_rows_state_from_the_pool_then_the_new_states() -> None:
    pool = torch.tensor([[1.0], [2.0]])
    new = torch.tensor([[10.0]])
    memory, image_index, tokens, length = (torch.zeros(1) for _ in range(4))
    inputs = PooledInputs(memory, image_index, tokens, length, pool, new, torch.tensor([2, 0, 0, 1]))
    gathered = inputs.gathered()
    assert gathered.state.flatten().tolist() == [10.0, 1.0, 1.0, 2.0]
    assert all(a is b for a, b in zip(gathered[:4], inputs[:4], strict=True))
