"""The model contract's ``<cap>_step`` (docs/architecture.md), written once for every captioner: the
trained ones (``export.models``: ``step`` beside their teacher-forcing ``forward``) and the imported
ones (``export.hf``: modules whose ``forward`` is the step). Each implements only its own decoding,
``decode_step(inputs)``, on the inputs gathered in a ``StepInputs``; ``step`` names the inputs, in the
order of the exported graph's inputs, here and nowhere else.

Inputs (``I`` images, ``N`` rows of many images and requests, ``T`` prefix width):

- ``memory`` float32 [I, M, D]: each image's encoder states, once per image (never copied per row);
- ``image_index`` int64 [N]: row → image;
- ``tokens`` int64 [N, T]: right-padded prefixes starting with the start token (a step that carries
  its history in ``state`` reads only ``tokens[n, length[n] - 1]``; one that carries none reads the
  whole prefix);
- ``length`` int64 [N]: real tokens per row, at least 1;
- ``state`` float32 [N, S]: each row's decoder state (``S`` = 1 and passed through unchanged where
  the step reads the whole prefix).

Outputs (``StepOutputs``, in this order): ``logprobs`` float32 [N, V], the next token's log-probs after
each row's last real token; ``state_out`` float32 [N, S], the row's state after this step;
``attention`` float32 [N, M], the row's attention over its image's memory at that position.

Version 3 of the step (``PooledInputs``) takes ``state`` as a pool [P, S] (the previous call's
``state_out``, as it came out), then ``state_new`` [J, S] (the initial states of the images new to the
call) and ``state_index`` int64 [N]: row n's state is row ``state_index[n]`` of
``concat(state, state_new)``; it computes what the step above computes on the gathered rows. A call
with rows has a pool of at least one row: a caller with no previous ``state_out`` passes the new states
as ``state`` and none in ``state_new`` (the same concatenation, so the same ``state_index``), which lets
a step whose new rows read nothing of their state (the kv step's) gather from ``state`` alone, without
copying the pool into a concatenation every call."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

Tensor = torch.Tensor
StepOutputs = tuple[Tensor, Tensor, Tensor]  # logprobs [N, V], state_out [N, S], attention [N, M]
STEP_OUTPUTS = ["logprobs", "state_out", "attention"]  # the exported graph's outputs, in order
# the graph's dynamic axes (torch.onnx.export's dynamic_axes): images and rows vary per call, T too
STEP_INPUT_AXES: dict[str, dict[int, str]] = {
    "memory": {0: "images"},
    "image_index": {0: "rows"},
    "tokens": {0: "rows", 1: "t"},
    "length": {0: "rows"},
    "state": {0: "rows"},
}
STEP_AXES: dict[str, dict[int, str]] = {**STEP_INPUT_AXES, **{name: {0: "rows"} for name in STEP_OUTPUTS}}


class StepInputs(NamedTuple):
    """The step's inputs (module docstring), in the exported graph's order."""

    memory: Tensor
    image_index: Tensor
    tokens: Tensor
    length: Tensor
    state: Tensor


class PooledInputs(NamedTuple):
    """Version 3's inputs (module docstring): ``state`` is the pool the rows' states are gathered from."""

    memory: Tensor
    image_index: Tensor
    tokens: Tensor
    length: Tensor
    state: Tensor
    state_new: Tensor
    state_index: Tensor

    def gathered(self) -> StepInputs:
        """The step's inputs with each row's own state [N, S]."""
        own = torch.cat([self.state, self.state_new], dim=0).index_select(0, self.state_index)
        return StepInputs(self.memory, self.image_index, self.tokens, self.length, own)


class CaptionerStep:
    """A captioner's ``<cap>_step``: ``step`` takes the contract's inputs (module docstring) and hands
    them to ``decode_step``, the one method a captioner writes."""

    def step(
        self, memory: Tensor, image_index: Tensor, tokens: Tensor, length: Tensor, state: Tensor
    ) -> StepOutputs:
        """The contract's step: inputs and outputs as the module docstring states them."""
        return self.decode_step(StepInputs(memory, image_index, tokens, length, state))

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        """This captioner's decoding of one step for the rows of ``inputs``: its ``StepOutputs``."""
        raise NotImplementedError(f"{type(self).__name__} does not decode a step")


class StepModule(CaptionerStep, nn.Module):
    """A module whose ``forward`` is the step: the step graph of an imported captioner."""

    forward = CaptionerStep.step


__all__ = ["CaptionerStep", "PooledInputs", "StepInputs", "StepModule", "StepOutputs", "Tensor"]
