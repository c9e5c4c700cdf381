"""How one model's variant is made: INT8 (``recipe``: dynamic or static QDQ, per graph, and the
quantization itself) or FP16 (``convert_fp16``); and the check that a variant keeps its FP32 model's
inputs and outputs (``check_contract``)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """``auto``: static QDQ for a graph with convolutions (dynamic ConvInteger is slower than FP32),
    except an imported captioner's own encoder (``captioner_encoder``, e.g. a ViT: one convolution, its
    patch embedding, before a transformer's MatMuls), whose MatMuls are quantized dynamically and its
    convolution kept FP32 (a ViT-base encoder 3.0x faster on AVX-512 VNNI, measured); for a recurrent
    step, its recurrent kernels only (quantizing its attention and output MatMuls too gained ~10% of
    speed and cost ~5 points of top-1 agreement on the default repository); dynamic MatMul/Gemm (and
    recurrent kernels) for the rest."""
    recurrent = tuple(op for op in RECURRENT if op in graph_ops)
    if method == "auto":
        if "Conv" in graph_ops and role != "captioner_encoder":
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


# -- FP16 ----------------------------------------------------------------------------------------------

FP16_METHOD = "convert_float_to_float16 (FP32 inputs and outputs)"


def convert_fp16(source: Path, out: Path) -> None:
    """Write ``source`` in FP16 to ``out``: onnxruntime's ``convert_float_to_float16`` with
    ``keep_io_types`` (a Cast at each FP32 input and output, so the model contract's tensors stay FP32)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    half = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(half, str(out))


def keep_declarations(source: Path, variant: Path) -> None:
    """Give ``variant``'s graph the inputs and outputs ``source`` declares (names, types, dims) where it
    has the same names: shape inference (INT8's pre-processing, the FP16 converter's) may have pinned a
    symbolic dim it resolved, e.g. a ranker's embedding size. ``check_contract`` then checks the rest."""
    import onnx

    fp32, model = onnx.load(str(source), load_external_data=False), onnx.load(str(variant))
    changed = False
    for field in ("input", "output"):
        mine, theirs = getattr(model.graph, field), getattr(fp32.graph, field)
        if [v.name for v in mine] == [v.name for v in theirs] and list(mine) != list(theirs):
            del mine[:]
            mine.extend(theirs)
            changed = True
    if changed:
        onnx.save(model, str(variant))


def _tensor(value: Any) -> tuple[str, int, tuple[int | str, ...]]:
    t = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in t.shape.dim)
    return value.name, int(t.elem_type), dims


def io_contract(path: Path) -> tuple[list[tuple[str, int, tuple[int | str, ...]]], ...]:
    """The inputs and outputs ``path`` declares: (name, ONNX element type, dims) each."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [_tensor(v) for v in graph.input], [_tensor(v) for v in graph.output]


def check_contract(fp32: Path, variant: Path) -> None:
    """``ValueError`` unless ``variant`` declares exactly the inputs and outputs of ``fp32`` (names,
    dtypes, dims): a variant serves under its FP32 model's config and manifest entry."""
    for part, a, b in zip(("inputs", "outputs"), io_contract(fp32), io_contract(variant), strict=True):
        if a != b:
            raise ValueError(f"its {part} {b} differ from the FP32 model's {a}")
