"""The torch.export programs of an imported captioner, for gradient explanations (``service.explain``):
``torch/<name>_encoder.pt2`` (the encoder with the image processor's rescale and mean/std inside, taking
float32 pixels 0–255 [B, H, W, 3] at its preprocessing's size, so that pixels can be attributed) and
``torch/<name>_step.pt2`` (the contract's step, the same tensors as its ONNX graph). Both are traced
around the unchanged transformers module (``export.packaging.programs.export_program``) and checked
against it on other shapes than those they were traced with (≤ ``PROGRAM_TOLERANCE``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from export.hf.staging import HfImportError
from export.models.step_contract import STEP_INPUT_AXES
from export.packaging.programs import PROGRAM_TOLERANCE, export_program, program_path

MIN_TOKENS = 2


def write_programs(
    encoder: nn.Module,
    step: nn.Module,
    images: Sequence[torch.Tensor],
    trials: Sequence[dict[str, torch.Tensor]],
    stage: Path,
    name: str,
    max_tokens: int,
) -> dict[str, float]:
    """Write both programs under ``stage`` (``images``: uint8 [B, H, W, 3] examples, the first traced;
    ``trials``: step inputs, the first traced, every prefix ≥ ``MIN_TOKENS`` columns) and return each
    one's max abs difference to the module; an ``HfImportError`` when one is over
    ``PROGRAM_TOLERANCE``. The step's prefixes are ``MIN_TOKENS`` to ``max_tokens`` (generate's
    ``max_length``) columns: torch.export specialises a width of 1 and guards the position table's size
    (``service.explain`` pads a one-token prefix on the right, which the step's mask leaves out)."""
    pixels = [{"image": im.to(torch.float32)} for im in images]
    diffs = {
        f"{name}_encoder": export_program(
            encoder,
            encoder.forward,
            pixels[0],
            {"image": {0: "batch"}},
            stage / program_path(f"{name}_encoder"),
            pixels[1:],
        ),
        f"{name}_step": export_program(
            step,
            step.forward,
            trials[0],
            STEP_INPUT_AXES,
            stage / program_path(f"{name}_step"),
            trials[1:],
            max_dims={"t": max(MIN_TOKENS, max_tokens)},
            min_dims={"t": MIN_TOKENS},
        ),
    }
    for graph, diff in diffs.items():
        if not diff <= PROGRAM_TOLERANCE:
            raise HfImportError(
                f"{graph}: torch.export program vs transformers max abs diff {diff:.2e} > {PROGRAM_TOLERANCE}"
            )
    return diffs


__all__ = ["MIN_TOKENS", "write_programs"]
