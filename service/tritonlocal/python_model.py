"""Triton python-backend model that runs one ONNX file with onnxruntime on CPU.

The local stand-in for ``platform: "onnxruntime_onnx"``: :mod:`service.tritonlocal.repository` copies
this file to ``<mirror>/<model>/1/model.py``; it runs inside Triton's python-backend stub with
``.venv-triton`` (numpy<2), never in the gateway. The config parameter ``onnx_path`` names the model
file and ``intra_op_threads`` onnxruntime's thread count (0 = its default). Requests that Triton's
dynamic batcher hands over together are run as one batch; when that fails, each request runs alone
so that a bad request fails only itself.

A model whose name ends in ``_fp16`` (``compcap quantize --precision fp16``'s variants) is loaded at
``ORT_ENABLE_EXTENDED``, the rest at ``ORT_ENABLE_ALL``: onnxruntime 1.31's CPU provider crashes
(SIGSEGV, taking the stub down) creating an FP16 LSTM step at ``ORT_ENABLE_ALL``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils  # provided by the python backend

FP16_SUFFIX = "_fp16"  # export.quantize.precisions.FP16.suffix (this file imports nothing of the project)


def optimization_level(model_name: str) -> ort.GraphOptimizationLevel:
    """The graph optimizations a model's session is created with (see the module docstring)."""
    if model_name.endswith(FP16_SUFFIX):
        return ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return ort.GraphOptimizationLevel.ORT_ENABLE_ALL


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads", {}).get("string_value", "0"))
        options.inter_op_num_threads = 1
        options.graph_optimization_level = optimization_level(str(config.get("name", "")))
        self.session = ort.InferenceSession(
            params["onnx_path"]["string_value"], sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [t["name"] for t in config["input"]]
        self.outputs = [t["name"] for t in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests: list[Any]) -> list[Any]:
        feeds = [
            {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            for request in requests
        ]
        if self.batched and len(feeds) > 1:
            batched = self._run_together(feeds)
            if batched is not None:
                return batched
        return [self._run_one(feed) for feed in feeds]

    def _run_together(self, feeds: list[dict[str, np.ndarray]]) -> list[Any] | None:
        try:
            merged = {name: np.concatenate([f[name] for f in feeds]) for name in self.inputs}
            values = self.session.run(self.outputs, merged)
        except Exception:  # retried request by request below, which reports the error
            return None
        sizes = [len(f[self.inputs[0]]) for f in feeds]
        bounds = np.cumsum(sizes)[:-1]
        parts = [np.split(value, bounds) for value in values]
        return [self._response([p[i] for p in parts]) for i in range(len(feeds))]

    def _run_one(self, feed: dict[str, np.ndarray]) -> Any:
        try:
            values = self.session.run(self.outputs, feed)
        except (ort.capi.onnxruntime_pybind11_state.InvalidArgument, ValueError) as exc:
            error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        except Exception as exc:  # reported to the client as an internal error
            error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INTERNAL)
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        return self._response(values)

    def _response(self, values: list[np.ndarray]) -> Any:
        tensors = [
            pb_utils.Tensor(name, np.ascontiguousarray(value))
            for name, value in zip(self.outputs, values, strict=True)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)
