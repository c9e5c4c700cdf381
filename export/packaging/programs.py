"""torch.export programs of the contract graphs, written beside the ONNX files for the gradient
explanations (``service.explain``): ``<repo>/torch/<graph>.pt2``, with the same inputs and outputs as
the ONNX graph of the same name. A program is self-contained (graph + weights): the service loads it
with ``torch.export.load`` and needs none of ``export``'s model classes. The visual encoder's program
takes the image as float32 (0–255) instead of uint8, so that pixels can be attributed.

Each program is checked against the eager module on inputs of other shapes than those it was
exported with (max abs difference ≤ ``PROGRAM_TOLERANCE``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim, export, load, save

from export.packaging.onnx import _Wrap

PROGRAM_DIR = "torch"
PROGRAM_TOLERANCE = 1e-5
MAX_DIM = 4096


def program_path(name: str) -> str:
    """Where graph ``name``'s program lives, relative to the repository."""
    return f"{PROGRAM_DIR}/{name}.pt2"


def export_program(
    owner: nn.Module,
    fn: Callable[..., object],
    inputs: dict[str, torch.Tensor],
    dynamic: dict[str, dict[int, str]],
    path: Path,
    checks: Sequence[dict[str, torch.Tensor]],
    max_dims: dict[str, int] | None = None,
    min_dims: dict[str, int] | None = None,
) -> float:
    """Export ``fn`` (a method of ``owner``, eval mode) with example ``inputs`` and the named dynamic
    axes ``dynamic`` (an axis name is one symbol across inputs; ``max_dims`` / ``min_dims`` bound some,
    else 1..``MAX_DIM``), save it to ``path`` and return the max abs difference program vs eager over
    ``checks``."""
    owner.eval()
    dims = {
        name: Dim(name, min=(min_dims or {}).get(name, 1), max=(max_dims or {}).get(name, MAX_DIM))
        for axes in dynamic.values()
        for name in axes.values()
    }
    shapes = tuple({axis: dims[name] for axis, name in dynamic.get(k, {}).items()} or None for k in inputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = export(_Wrap(fn, owner).eval(), tuple(inputs.values()), dynamic_shapes=(shapes,))
        save(program, str(path))
        loaded = load(str(path)).module()
        worst = 0.0
        for trial in checks:
            expected = fn(*trial.values())
            got = loaded(*trial.values())
            pairs = zip(_as_tuple(expected), _as_tuple(got), strict=True)
            worst = max(worst, *(float((a - b).abs().max()) for a, b in pairs))
    return worst


def padded_tokens(fn: Callable[..., torch.Tensor], width: int, pad_id: int) -> Callable[..., torch.Tensor]:
    """``fn(tokens [B, T], *rest)`` with ``tokens`` right-padded with ``pad_id`` to ``width`` columns
    first (T ≤ width). torch.export specialises an LSTM's sequence length to the one it traced, so a
    text program pads inside to that one width and keeps the ONNX graph's dynamic ``tokens`` axis. The
    text encoders read the hidden state at ``length - 1`` and are causal: padding changes nothing."""

    def padded(tokens: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return fn(F.pad(tokens, (0, width - tokens.size(1)), value=pad_id), *rest)

    return padded


def _as_tuple(value: object) -> tuple[torch.Tensor, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)  # type: ignore[return-value]
