"""How one model is quantized (``recipe``: dynamic or static QDQ, per graph) and the quantization itself."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export.quantize.common import METHODS, MIN_COLUMNS

# -- variants ----------------------------------------------------------------------------------------


def _small_weight_nodes(model_path: Path) -> list[str]:
    """MatMul/Gemm nodes whose constant weight has fewer than ``MIN_COLUMNS`` output columns."""
    import onnx

    graph = onnx.load(str(model_path)).graph
    weights = {t.name: list(t.dims) for t in graph.initializer}
    small = []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
            continue
        dims = weights.get(node.input[1])
        if dims is None:
            continue
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        columns = dims[0] if node.op_type == "Gemm" and trans_b else dims[-1]
        if columns < MIN_COLUMNS:
            small.append(node.name)
    return small


def graph_ops(model_path: Path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(model_path)).graph.node}


class _Feeds:
    """A ``CalibrationDataReader`` over recorded calls."""

    def __init__(self, calls: Sequence[dict[str, np.ndarray]]) -> None:
        self._it = iter(calls)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


RECURRENT = ("LSTM", "GRU")


@dataclass(frozen=True)
class Recipe:
    """How one model is quantized: ``method`` and the op types it quantizes (the rest stay FP32)."""

    method: str  # dynamic | static
    ops: tuple[str, ...]

    def describe(self) -> str:
        recurrent = [op for op in self.ops if op in RECURRENT]
        if self.method == "static":
            text = "static QDQ (" + ", ".join(op for op in self.ops if op not in RECURRENT)
            text += "; the first Conv FP32)" if "Conv" in self.ops else ")"
            return text + (f" + dynamic {', '.join(recurrent)}" if recurrent else "")
        return f"dynamic ({', '.join(self.ops)})"


def recipe(role: str, graph_ops: set[str], method: str) -> Recipe:
    """``auto``: static QDQ for a graph with convolutions (dynamic ConvInteger is slower than FP32);
    for a recurrent step, its recurrent kernels only (quantizing its attention and output MatMuls too
    gained ~10% of speed and cost ~5 points of top-1 agreement on the default repository); dynamic
    MatMul/Gemm (and recurrent kernels) for the rest."""
    recurrent = tuple(op for op in RECURRENT if op in graph_ops)
    if method == "auto":
        if "Conv" in graph_ops:
            method = "static"
        elif role == "captioner_step" and recurrent:
            return Recipe("dynamic", recurrent)
        else:
            method = "dynamic"
    if method == "static":
        return Recipe("static", ("Conv", "MatMul", "Gemm", *recurrent))
    if method == "dynamic":
        return Recipe("dynamic", ("MatMul", "Gemm", *recurrent))
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _first_conv(model_path: Path) -> list[str]:
    """The first Conv node: it reads the image, whose INT8 activations cost most of the precision
    (regions' relative error 21% with it, 1.7% without, on the default repository's encoder)."""
    import onnx

    return [n.name for n in onnx.load(str(model_path)).graph.node if n.op_type == "Conv"][:1]


def preprocess(source: Path, work: Path) -> Path:
    """``source`` after onnxruntime's pre-processing (shape inference, clean-up), or as it is."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = work / f"{source.parent.parent.name}.pre.onnx"
    try:
        quant_pre_process(str(source), str(pre))
    except Exception:  # a graph symbolic shape inference cannot handle is quantized as it is
        shutil.copyfile(source, pre)
    return pre


def quantize_model(
    source: Path, out: Path, recipe: Recipe, calls: Sequence[dict[str, np.ndarray]], work: Path
) -> None:
    """Write ``source`` quantized by ``recipe`` to ``out`` (``calls``: static's calibration data)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    pre = preprocess(source, work)
    keep = _small_weight_nodes(pre)
    recurrent = [op for op in recipe.ops if op in RECURRENT]
    out.parent.mkdir(parents=True, exist_ok=True)
    if recipe.method == "dynamic":
        quantize_dynamic(
            str(pre),
            str(out),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(recipe.ops),
            nodes_to_exclude=keep,
        )
        return
    if not calls:
        raise ValueError(f"static quantization of {source} needs recorded calls to calibrate on")
    reader: CalibrationDataReader = _Feeds(calls)
    qdq = work / f"{out.parent.parent.name}.qdq.onnx"
    quantize_static(
        str(pre),
        str(qdq),
        reader,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=[op for op in recipe.ops if op not in RECURRENT],
        nodes_to_exclude=keep + _first_conv(pre),
    )
    if recurrent:  # QDQ has no recurrent kernels: their weights are quantized dynamically
        quantize_dynamic(str(qdq), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=recurrent)
    else:
        shutil.move(str(qdq), str(out))
