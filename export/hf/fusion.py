"""Fused graphs for an imported captioner: onnxruntime's transformer optimizer
(``onnxruntime.transformers.optimizer``: attention, layer-norm, skip-layer-norm, GELU and bias fusions
into its own kernels) on the encoder and the kept step graph, checked against the unfused graph on
onnxruntime (max abs difference ≤ the import's tolerance, the same inputs and outputs) and timed against
it, each with the threads the embedded backend gives the model, best of ``REPEATS`` after a warm-up,
the two alternating. ``--fuse auto`` keeps the fused graph where it takes at most ``MARGIN`` of the
unfused one's time; ``on`` keeps it whatever the timing (where it is correct); ``off`` does not try.

onnxruntime's own session-level optimizations already fuse layer norms and GELUs and fold biases into
GEMMs when a session loads a graph, so the optimizer adds less than its list suggests; the import's
report says per graph which fusions it made, both timings and which graph it kept
(docs/bring-your-own-model.md, "Speed")."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

FuseForm = Literal["auto", "on", "off"]
FUSE_FORMS: tuple[str, ...] = ("auto", "on", "off")
REPEATS = 3
MARGIN = 0.97  # a fused graph must take at most this share of the unfused one's time


@dataclass(frozen=True)
class FusionTiming:
    """One graph's fusions (operator → how many the optimizer made), ms per call unfused and fused, the
    fused graph's max abs difference to the unfused one, and whether the fused graph was kept."""

    graph: str
    fusions: dict[str, int] = field(default_factory=dict)
    unfused_ms: float = 0.0
    fused_ms: float = 0.0
    diff: float = 0.0
    kept: bool = False
    why: str = ""

    def summary(self) -> str:
        """One line: the fusions, both timings and what was kept."""
        made = ", ".join(f"{op} {n}" for op, n in self.fusions.items()) or "none"
        if self.why:
            return f"{self.graph}: fusions {made}: {self.why}"
        kept = "fused" if self.kept else "unfused"
        return (
            f"{self.graph}: fusions {made}: {_ms(self.unfused_ms)} -> {_ms(self.fused_ms)} ms per call "
            f"(x{self.unfused_ms / max(self.fused_ms, 1e-9):.2f}), max abs diff {self.diff:.1e}: kept {kept}"
        )


def _ms(ms: float) -> str:
    """A call's ms: one decimal from 10 ms, three significant digits below."""
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.3g}"


def optimize(
    path: Path, out: Path, model_type: str, heads: int, hidden: int, only: str | None = None
) -> dict[str, int]:
    """``path`` through the transformer optimizer (its fusions only: ``opt_level`` 0 leaves the rest to
    the session) into ``out``; the operators it fused and how many. ``only``: that fusion alone (a
    ``FusionOptions`` switch, e.g. ``enable_skip_layer_norm``)."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    options = FusionOptions(model_type)
    if only is not None:
        switches = [name for name in vars(options) if name.startswith("enable_")]
        if only not in switches:
            raise ValueError(f"only must be one of {switches}, got {only!r}")
        for name in switches:
            setattr(options, name, name == only)
    model = optimizer.optimize_model(
        str(path),
        model_type=model_type,
        num_heads=heads,
        hidden_size=hidden,
        opt_level=0,
        optimization_options=options,
    )
    model.save_model_to_file(str(out), use_external_data_format=False)
    return {op: int(n) for op, n in model.get_fused_operator_statistics().items() if n}


def _session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _contract(session: ort.InferenceSession) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    return (
        [(i.name, i.type) for i in session.get_inputs()],
        [(o.name, o.type) for o in session.get_outputs()],
    )


def choose_fused(
    path: Path,
    feed: dict[str, np.ndarray],
    model_type: str,
    heads: int,
    hidden: int,
    form: FuseForm,
    tolerance: float,
) -> FusionTiming:
    """Fuse the graph at ``path`` (module docstring), and where the fused graph is kept put it at
    ``path``; ``feed``: the inputs it is checked and timed on."""
    from service.backends.onnxruntime.backend import model_threads

    if form not in FUSE_FORMS:
        raise ValueError(f"form must be one of {FUSE_FORMS}, got {form!r}")
    graph = path.parent.parent.name
    if form == "off":
        return FusionTiming(graph, why="not tried (--fuse off)")
    fused = path.with_name("model.fused.onnx")
    try:
        fusions = optimize(path, fused, model_type, heads, hidden)
        if not fusions:
            return FusionTiming(graph, why="the optimizer fused nothing: kept unfused")
        threads = model_threads(0, 4, path.stat().st_size)
        sessions = [_session(path, threads), _session(fused, threads)]
        if _contract(sessions[0]) != _contract(sessions[1]):
            return FusionTiming(
                graph, fusions, why="the fused graph's inputs or outputs differ: kept unfused"
            )
        outputs = [s.run(None, feed) for s in sessions]  # also the warm-up
        diff = max(float(np.abs(a - b).max()) if a.size else 0.0 for a, b in zip(*outputs, strict=True))
        if not diff <= tolerance:
            return FusionTiming(
                graph, fusions, diff=diff, why=f"max abs diff {diff:.1e} > {tolerance}: kept unfused"
            )
        best = [float("inf"), float("inf")]
        for _ in range(REPEATS):
            for k, session in enumerate(sessions):
                start = time.perf_counter()
                session.run(None, feed)
                best[k] = min(best[k], time.perf_counter() - start)
        unfused_ms, fused_ms = best[0] * 1e3, best[1] * 1e3
        kept = form == "on" or fused_ms <= MARGIN * unfused_ms
        del sessions
        if kept:
            os.replace(fused, path)
        return FusionTiming(graph, fusions, unfused_ms, fused_ms, diff, kept)
    finally:
        if fused.exists():
            fused.unlink()


__all__ = ["FUSE_FORMS", "MARGIN", "FuseForm", "FusionTiming", "choose_fused", "optimize"]
