"""``compcap quantize [--precision int8|fp16]``: INT8 (default) or FP16 variants of a repository's
models, gated on quality through the served engine, listed in the manifest beside the FP32 models and
served with ``COMPCAP_PRECISION=int8`` (or ``fp16``). What differs per precision is one record
(``precisions.PrecisionSpec``: suffix, how a variant is made, the gate's thresholds, whether a variant
not faster is dropped); the steps below are the same for both, written for INT8:

1. Calibration: training-world images (the first ``calibration_images`` of the world the repository
   was trained on) are captioned through ``CaptionEngine`` on the FP32 models in every evaluation run
   (each captioner plain and re-ranked, beam 5), and every model call's inputs are kept: what static
   quantization calibrates on and what each variant is timed on.
2. Variants (``recipe``): ``dynamic`` (``quantize_dynamic``: INT8 weights, activations quantized at run
   time from each call's range) or ``static`` (``quantize_static`` in the QDQ format: activation ranges
   calibrated in step 1, weights per channel; recurrent kernels, which QDQ cannot quantize, dynamically).
   ``auto``, measured on the default repository (docs/benchmarks.md, "INT8"): static for a graph with
   convolutions, its first Conv (the one reading the image) left FP32; for a recurrent step, its LSTM
   kernels only; dynamic MatMul/Gemm (and recurrent kernels) for the rest. A matrix-vector MatMul (a
   weight of fewer than ``MIN_COLUMNS`` columns, e.g. an attention score) always stays FP32: per-tensor
   INT8 loses most of its precision and gains no time. Each variant is a Triton model of its own,
   ``<name>_int8/config.pbtxt`` (the FP32 config, renamed) + ``<name>_int8/1/model.onnx``, timed
   against its FP32 model (in turn, median) on the largest recorded call; one not faster by
   ``min_speedup``, or that fails to build or run, is dropped: its model serves FP32.
3. The gate, on the engine path (FP32 and INT8 engines on the same images of the evaluation world: the
   build's test world, its first ``eval_images``): CIDEr-D (DF from the evaluated references, as the
   build's ``quality``) and top-1 caption agreement of every evaluation run (``runs_for``). Variants
   are admitted one at a time (``admit``: the steps first): one that takes a run it is part of past a
   threshold is rejected and its model serves FP32. Then the systematicity probe's mean Recall@5 of the
   held-out and the seen pairs (each captioner at beam 5, and re-ranked by its own ranker with 100
   beams, the probes' BUTR+RR) on the repository's systematicity probe set, when it has one (else
   noted), for the admitted set as a whole. A set that misses a threshold is recorded as failed
   (``precision_variants.int8.gate``) and its models are not listed in ``models``: no gateway serves
   them (``Manifest.served_models``).

INT8 activations quantized per call make a row's outputs depend a little on the other rows of its call,
so the INT8 captions (and the gate's figures) move slightly with how the engine batched the images.

FP16 (``--precision fp16``): ``convert_float_to_float16`` with FP32 inputs and outputs (every variant
must declare its FP32 model's inputs and outputs: names, dtypes, dims), gated at CIDEr-D within 1%,
top-1 >= 95%, Recall@5 within 1 point; its CPU timing is recorded (``device``) but drops nothing. BF16
is not built (onnxruntime's CUDA provider has only partial BF16 kernels).
"""

from __future__ import annotations

from export.quantize.common import METHODS, PRECISION, SUFFIX, QuantizeResult, Thresholds
from export.quantize.methods import recipe
from export.quantize.precisions import FP16, INT8, SPECS, PrecisionSpec, spec_for
from export.quantize.run import quantize_repo, report_lines

__all__ = [
    "FP16",
    "INT8",
    "METHODS",
    "PRECISION",
    "SPECS",
    "SUFFIX",
    "PrecisionSpec",
    "QuantizeResult",
    "Thresholds",
    "quantize_repo",
    "recipe",
    "report_lines",
    "spec_for",
]
