"""The same MatMuls in torch and in onnxruntime on this CPU: a ViT-base + GPT-2 decoder's weight shapes
(768 → 2 304 attention projection, 768 → 3 072 and 3 072 → 768 MLP, 768 → 50 257 output head) at the
rows a step sees (one image's beam of 5, eight images' 40), with one thread and with every core, each
the median of ``--repeats`` calls after a warm-up. It tells whether onnxruntime's kernels, not the
graph around them, are what keeps an imported captioner slower than ``transformers``.

Run: ``python -m compcap_lab.steps.matmul_kernels [--json OUT]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from loadtests.load.results import run_and_save, script

SHAPES = ((768, 2304), (768, 3072), (3072, 768), (768, 50257))
ROWS = (1, 5, 40)


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def _session(weight: np.ndarray, threads: int) -> Any:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # what onnxruntime 1.31 reads
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from service.backends.onnxruntime.backend import usable_cores

    rng = np.random.default_rng(0)
    rows_out = []
    for threads in sorted({1, usable_cores()}):
        torch.set_num_threads(threads)
        for k, n in SHAPES:
            weight = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
            session, w = _session(weight, threads), torch.from_numpy(weight)
            for rows in ROWS:
                x = rng.standard_normal((rows, k)).astype(np.float32)
                feed, xt = {"x": x}, torch.from_numpy(x)
                ort_ms = round(_median_ms(partial(session.run, None, feed), args.repeats), 4)
                torch_ms = round(_median_ms(partial(torch.mm, xt, w), args.repeats), 4)
                rows_out.append(
                    {
                        "threads": threads,
                        "shape": f"{k}x{n}",
                        "rows": rows,
                        "onnxruntime_ms": ort_ms,
                        "torch_ms": torch_ms,
                        "onnxruntime_over_torch": round(ort_ms / torch_ms, 3),
                    }
                )
    return {"rows": rows_out}


def summary(result: dict[str, Any]) -> Iterator[str]:
    for r in result["rows"]:
        yield (
            f"{r['threads']} thread(s) {r['shape']:>9} x {r['rows']:2d} rows: onnxruntime "
            f"{r['onnxruntime_ms']:7.3f} ms  torch {r['torch_ms']:7.3f} ms  "
            f"({r['onnxruntime_over_torch']:.2f}x)"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=20, help="timed calls of each kernel")
    parser.add_argument("--json", default=None, help="write the figures as JSON here")


def matmul_kernels(args: argparse.Namespace) -> int:
    return run_and_save(args, measure, summary)


main = script(
    __doc__.split("\n\n")[0], add_arguments, matmul_kernels, prog="python -m compcap_lab.steps.matmul_kernels"
)

if __name__ == "__main__":
    raise SystemExit(main())
