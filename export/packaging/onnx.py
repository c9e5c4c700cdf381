"""ONNX export of each role in the model contract (docs/architecture.md) and the torch ↔ onnxruntime
parity check."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

OPSET = 17


class _Wrap(nn.Module):
    """Exposes one method of a model as ``forward`` so each contract role exports as its own graph."""

    def __init__(self, fn: Callable[..., object], owner: nn.Module) -> None:
        super().__init__()
        self.owner = owner
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> object:
        return self.fn(*args)


@dataclass(frozen=True)
class GraphSpec:
    """What to export: inputs (name → example tensor), output names, and which axes are dynamic."""

    inputs: dict[str, torch.Tensor]
    outputs: list[str]
    dynamic: dict[str, dict[int, str]]


def export_graph(owner: nn.Module, fn: Callable[..., object], spec: GraphSpec, path: Path) -> None:
    """Trace ``fn`` (a method of ``owner``) with ``spec``'s example inputs and write ONNX to ``path``.
    ``owner`` is left in eval mode (the exporter restores the wrapper's mode, and with it the owner's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    owner.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Wrap(fn, owner).eval(),
            tuple(spec.inputs.values()),
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=list(spec.inputs),
            output_names=spec.outputs,
            dynamic_axes=spec.dynamic,
        )


def parity(owner: nn.Module, fn: Callable[..., object], path: Path, inputs: dict[str, torch.Tensor]) -> float:
    """Max abs difference over all outputs between torch ``fn`` and onnxruntime on ``inputs``."""
    owner.eval()
    with torch.no_grad():
        expected = fn(*inputs.values())
    expected_list: list[torch.Tensor] = list(expected) if isinstance(expected, tuple) else [expected]  # type: ignore[list-item]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {k: v.detach().numpy() for k, v in inputs.items()})
    return max(
        float(np.abs(np.asarray(g) - e.detach().numpy()).max()) if e.numel() else 0.0
        for g, e in zip(got, expected_list, strict=True)
    )
