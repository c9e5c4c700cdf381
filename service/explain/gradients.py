"""Gradient attributions (Captum) on the torch.export programs the build writes beside the ONNX files
(``export.packaging.programs``; ``ModelEntry.program``). Imports torch and captum: only ``service.explain``
loads this module, and only when a gradient method is asked for (the ``explain`` extra).

The explained score of word t is S_w(t) = log-softmax of the caption's word t at step t, with the
caption teacher-forced (``TeacherForcedScores``). Attributions are taken with respect to the region
features [R, D] (the encoder's output) or, as an option, the pixels [H, W, 3] (float, 0–255, before the
encoder's normalisation). Integrated gradients use a zero baseline in that space: all region features
off, or a black image.

The programs were exported from modules in ``eval()`` (no dropout, batch-norm statistics frozen); an
exported program cannot switch mode. Guided backpropagation overrides ReLU gradients through Captum's
hooks on ``nn.ReLU`` modules, which an exported graph does not have (its ReLUs are ``aten.relu`` calls,
and the encoder ends in a functional ``torch.relu``), so ``load_program`` turns every ReLU call into an
``nn.ReLU`` module first (``relu_calls`` counts what is left: 0)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import GraphModule

from service.checks import at_least
from service.manifest import Manifest

GradientMethod = Literal["saliency", "guided_backprop", "integrated_gradients"]
GRADIENT_METHODS: tuple[str, ...] = ("saliency", "guided_backprop", "integrated_gradients")
_RELU_TARGETS = (
    torch.ops.aten.relu.default,
    torch.ops.aten.relu_.default,
    torch.relu,
    torch.nn.functional.relu,
)

# an imported step's program reads prefixes of 2 columns or more (export.hf.imported_programs)
IMPORTED_MIN_WIDTH = 2
LOCK = threading.Lock()  # Captum's guided-backprop hooks live on shared modules: one attribution at a time


def relu_calls(module: GraphModule) -> int:
    """ReLU calls left in ``module``'s graph that guided backpropagation would not see."""
    return sum(1 for n in module.graph.nodes if n.op == "call_function" and n.target in _RELU_TARGETS)


def load_program(path: Path) -> GraphModule:
    """A program's module with every ReLU call replaced by an ``nn.ReLU`` submodule."""
    module = torch.export.load(str(path)).module()
    assert isinstance(module, GraphModule)
    for i, node in enumerate(
        [n for n in module.graph.nodes if n.op == "call_function" and n.target in _RELU_TARGETS]
    ):
        name = f"guided_relu_{i}"
        module.add_submodule(name, nn.ReLU())
        with module.graph.inserting_after(node):
            replacement = module.graph.call_module(name, args=(node.args[0],))
        node.replace_all_uses_with(replacement)
        module.graph.erase_node(node)
    module.recompile()
    return module


class MemoryState(nn.Module):
    """An imported captioner's ``init`` when its memory is what is attributed: memory [B, M, D] →
    (memory, state zeros [B, 1]); its own encoder made the memory, and its step reads no state."""

    def forward(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return memory, memory.new_zeros(memory.shape[0], 1)


class TeacherForcedScores(nn.Module):
    """x → S_w [B, T]: the log-prob of each caption word at its step. ``x`` is region features
    [B, R, D] or, with an ``encoder``, float pixels [B, H, W, 3]; an imported captioner's encoder is its
    ``init`` (pixels → memory, state), ``pixels`` then says that ``x`` is pixels. ``last_token``: the step
    reads only the last token and carries state (LSTM: one call per step); else it reads the whole
    prefix (all T prefixes in one call), as wide as ``min_width`` at least (padded on the right)."""

    def __init__(
        self,
        init: nn.Module,
        step: nn.Module,
        words: Sequence[int],
        bos: int,
        last_token: bool,
        encoder: nn.Module | None = None,
        pixels: bool = False,
        min_width: int = 1,
    ) -> None:
        super().__init__()
        if not words:
            raise ValueError("words must not be empty")
        self.init_graph, self.step_graph, self.encoder = init, step, encoder
        self.words = torch.tensor(list(words), dtype=torch.int64)
        self.tokens = torch.tensor([bos, *words[:-1]], dtype=torch.int64)  # the inputs of steps 0..T-1
        self.last_token = last_token
        self.pixels = pixels or encoder is not None
        # a step program traced for prefixes of >= min_width columns: pad on the right (past every length)
        self.tokens = F.pad(self.tokens, (0, max(0, min_width - len(self.tokens))), value=bos)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        regions = self.encoder(x) if self.encoder is not None else x
        memory, state = self.init_graph(regions)
        b, t = regions.shape[0], len(self.words)
        if self.last_token:
            index = torch.arange(b)
            scores = []
            for i in range(t):
                prefix = self.tokens[: i + 1].expand(b, -1)
                logprobs, state, _ = self.step_graph(memory, index, prefix, torch.full((b,), i + 1), state)
                scores.append(logprobs[:, self.words[i]])
            return torch.stack(scores, dim=1)
        index = torch.arange(b).repeat_interleave(t)
        prefixes = self.tokens.expand(b * t, -1)
        lengths = torch.arange(1, t + 1).repeat(b)
        logprobs, _, _ = self.step_graph(memory, index, prefixes, lengths, state.repeat_interleave(t, dim=0))
        return logprobs.gather(1, self.words.repeat(b).unsqueeze(1)).view(b, t)


@dataclass(frozen=True)
class Attribution:
    """Per word: ``values`` float32 [T, *x] attributions of the input, ``scores`` S_w(x) [T],
    ``delta`` (IG only) float64 [T] the convergence delta Σ attributions − (S_w(x) − S_w(baseline)),
    ``gap`` float64 [T] that difference."""

    values: np.ndarray
    scores: list[float | None]
    delta: np.ndarray | None
    gap: np.ndarray | None


# step rows per forward pass: the programs' bound (export.packaging.package.MAX_PROGRAM_BATCH)
MAX_ROWS = 4096


def attribute(model: TeacherForcedScores, x: torch.Tensor, method: str, n_steps: int = 50) -> Attribution:
    """Attribute each caption word's score to ``x`` [1, ...] with ``method`` (``GRADIENT_METHODS``).

    All T words in one Captum call: ``x`` is repeated T times and copy t's target is word t, so one
    forward and one backward pass (over T × n_steps rows for integrated gradients, in chunks of at most
    ``MAX_ROWS`` input copies, fewer for pixels) serve every word; copy t's gradient is exactly the
    gradient of S_w(t), because the copies do not interact."""
    from captum.attr import GuidedBackprop, IntegratedGradients, Saliency

    if method not in GRADIENT_METHODS:
        raise ValueError(f"method must be one of {GRADIENT_METHODS}, got {method!r}")
    if x.shape[0] != 1:
        raise ValueError(f"x must hold one input, got batch {x.shape[0]}")
    at_least(1, n_steps=n_steps)
    t = len(model.words)
    copies = x.expand(t, *x.shape[1:]).clone()
    targets = list(range(t))
    delta = gap = None
    with LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Captum: "input tensors do not require gradients" (it sets them)
        with torch.no_grad():
            scores = model(x)[0]
            if method == "integrated_gradients":
                gap = (scores - model(torch.zeros_like(x))[0]).double().numpy()
        if method == "saliency":
            out = Saliency(model).attribute(copies, target=targets, abs=True)
        elif method == "guided_backprop":
            out = GuidedBackprop(model).attribute(copies, target=targets)
        else:
            rows = 64 if model.pixels else MAX_ROWS  # pixels run the encoder on every row
            rows = rows if model.last_token else rows // t  # a prefix reader's step takes T rows per copy
            out, conv = IntegratedGradients(model).attribute(
                copies,
                baselines=torch.zeros_like(copies),
                target=targets,
                n_steps=n_steps,
                internal_batch_size=max(t, min(rows, t * n_steps)),
                return_convergence_delta=True,
            )
            delta = conv.detach().double().numpy().reshape(t)
    listed: list[float | None] = [float(v) for v in scores]
    return Attribution(out.detach().numpy().astype(np.float32), listed, delta, gap)


class ProgramCache:
    """The repository's programs, loaded once each (ReLUs made modules), and attribution over them.
    ``threads``: torch's intra-op threads (the gateway's cores belong to caption users first)."""

    def __init__(self, repo: Path, manifest: Manifest, threads: int = 1) -> None:
        self.repo, self.manifest = repo, manifest
        torch.set_num_threads(max(1, threads))
        self._graphs: dict[str, GraphModule] = {}

    def graph(self, name: str) -> GraphModule:
        if name not in self._graphs:
            program = self.manifest.model(name).program
            if program is None:
                raise FileNotFoundError(f"{name} has no torch program in this repository")
            self._graphs[name] = load_program(self.repo / program)
        return self._graphs[name]

    def relus(self, captioner: str, pixels: bool) -> int:
        """ReLU modules guided backpropagation overrides in the graphs ``scorer`` chains (0: it is the
        plain gradient, e.g. for transformers' GELU networks)."""
        cap = self.manifest.captioner(captioner)
        if cap.image is not None:  # imported: its encoder is its init, attributed through on pixels only
            names = [cap.init, cap.step] if pixels else [cap.step]
        else:
            names = [cap.init, cap.step, *(["visual_encoder"] if pixels else [])]
        return sum(
            1 for n in names for m, _ in self.graph(n).named_children() if m.startswith("guided_relu_")
        )

    def scorer(self, captioner: str, words: Sequence[int], pixels: bool) -> TeacherForcedScores:
        cap = self.manifest.captioner(captioner)
        last = cap.reads == "last_token"
        if cap.tokens is not None and cap.image is not None:  # imported: its own encoder and token ids
            init = self.graph(cap.init) if pixels else MemoryState()
            return TeacherForcedScores(
                init, self.graph(cap.step), words, cap.tokens.bos_id, last, pixels=pixels
            )
        encoder = self.graph("visual_encoder") if pixels else None
        bos = self.manifest.vocabulary.bos_id
        return TeacherForcedScores(self.graph(cap.init), self.graph(cap.step), words, bos, last, encoder)

    def attribute(
        self, captioner: str, image: np.ndarray, words: Sequence[int], method: str, to: str, n_steps: int
    ) -> Attribution:
        """Attributions of each word of ``words`` on uint8 ``image`` [1, H, W, 3] (at the size the
        captioner's encoder reads), to the region features (``to="regions"``: values [T, R, D]; an
        imported captioner's memory [T, M, D]) or the pixels (``"pixels"``: [T, H, W, 3])."""
        pixels = torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32))
        if to == "pixels":
            return attribute(self.scorer(captioner, words, True), pixels, method, n_steps)
        cap = self.manifest.captioner(captioner)
        encoder = self.graph(cap.init if cap.image is not None else "visual_encoder")
        with torch.no_grad():
            regions = encoder(pixels)
        regions = regions[0] if isinstance(regions, tuple | list) else regions  # imported: (memory, state)
        return attribute(self.scorer(captioner, words, False), regions, method, n_steps)
