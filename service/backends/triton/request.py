"""Reusable request parts of one model for the Triton backend: an ``InferInput`` per input (shape and
data set per call) and the ``InferRequestedOutput`` objects, for tensors in the gRPC payload or in a
shared-memory region. Reuse is safe under concurrent calls because the caller fills them and calls
``infer`` with no ``await`` in between: tritonclient serialises the request before its first ``await``."""

from __future__ import annotations

import math

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

from service.backends.triton.shm import Region, aligned
from service.manifest import ModelEntry


class ModelCall:
    def __init__(self, entry: ModelEntry) -> None:
        self.entry = entry
        self.name = entry.name
        self.max_batch = entry.max_batch_size
        batch = [1] if self.max_batch > 0 else []
        self.inputs = {
            t.name: grpcclient.InferInput(t.name, [*batch, *t.dims], t.dtype) for t in entry.inputs
        }
        self.dtypes = {t.name: t.dtype for t in entry.inputs}
        self.outputs = [grpcclient.InferRequestedOutput(t.name) for t in entry.outputs]
        self.shm_outputs = [grpcclient.InferRequestedOutput(t.name) for t in entry.outputs]
        self.output_names = [t.name for t in entry.outputs]

    def check(self, inputs: dict[str, np.ndarray]) -> None:
        """Raises ``ValueError`` naming a missing, extra, non-array or wrongly typed input."""
        if set(inputs) != set(self.inputs):
            raise ValueError(f"expected inputs {sorted(self.inputs)}, got {sorted(inputs)}")
        for name, array in inputs.items():
            if not isinstance(array, np.ndarray):
                raise ValueError(f"input {name!r} is not a numpy array")
            if np_to_triton_dtype(array.dtype) != self.dtypes[name]:
                raise ValueError(f"input {name!r}: got {array.dtype}, expected {self.dtypes[name]}")

    def fill(self, inputs: dict[str, np.ndarray]) -> list[grpcclient.InferInput]:
        """Inputs in the request payload (``check``-ed by the caller)."""
        filled = []
        for name, infer_input in self.inputs.items():
            infer_input.set_shape(list(inputs[name].shape))
            try:
                infer_input.set_data_from_numpy(inputs[name])
            except InferenceServerException as exc:
                raise ValueError(f"input {name!r}: {exc.message()}") from exc
            filled.append(infer_input)
        return filled

    def output_bytes(self, inputs: dict[str, np.ndarray]) -> list[int] | None:
        """An upper bound of each output's size, or ``None`` when the dims do not give one. Per-image
        models: ``[batch, *dims]`` with fixed dims; explicit-dims models (``<cap>_step``): a leading -1
        is at most the largest leading input dim (N rows ≥ I images)."""
        leading = max((a.shape[0] for a in inputs.values() if a.ndim > 0), default=0)
        sizes = []
        for spec in self.entry.outputs:
            dims = [leading, *spec.dims] if self.max_batch > 0 else list(spec.dims)
            if dims and dims[0] == -1:
                dims[0] = leading
            if any(d < 0 for d in dims):
                return None
            sizes.append(math.prod(dims) * np.dtype(triton_to_np_dtype(spec.dtype)).itemsize)
        return sizes

    def fill_shared(
        self, inputs: dict[str, np.ndarray], region: Region, output_sizes: list[int]
    ) -> tuple[list[grpcclient.InferInput], list[grpcclient.InferRequestedOutput], list[int]]:
        """Copy the inputs into ``region`` and point inputs and outputs at it; returns the output
        offsets. ``region`` must hold ``shared_bytes(inputs, output_sizes)``."""
        offset = 0
        filled = []
        for name, infer_input in self.inputs.items():
            array = inputs[name]
            region.write(array, offset)
            infer_input.set_shape(list(array.shape))
            infer_input.set_shared_memory(region.name, array.nbytes, offset)
            filled.append(infer_input)
            offset = aligned(offset + array.nbytes)
        offsets = []
        for output, size in zip(self.shm_outputs, output_sizes, strict=True):
            output.set_shared_memory(region.name, size, offset)
            offsets.append(offset)
            offset = aligned(offset + size)
        return filled, self.shm_outputs, offsets

    @staticmethod
    def shared_bytes(inputs: dict[str, np.ndarray], output_sizes: list[int]) -> int:
        return sum(aligned(a.nbytes) for a in inputs.values()) + sum(aligned(s) for s in output_sizes)

    def read_payload(self, response: grpcclient.InferResult) -> dict[str, np.ndarray]:
        outputs = {}
        for name in self.output_names:
            array = response.as_numpy(name)
            if array is None:
                raise RuntimeError(f"response has no output {name!r}")
            outputs[name] = np.require(array, requirements=["W"])  # frombuffer views are read-only
        return outputs

    def read_shared(
        self, response: grpcclient.InferResult, region: Region, offsets: list[int]
    ) -> dict[str, np.ndarray]:
        outputs = {}
        for name, offset in zip(self.output_names, offsets, strict=True):
            tensor = response.get_output(name)
            if tensor is None:
                raise RuntimeError(f"response has no output {name!r}")
            dtype = np.dtype(triton_to_np_dtype(tensor.datatype))
            outputs[name] = region.read(dtype, list(tensor.shape), offset)
        return outputs
