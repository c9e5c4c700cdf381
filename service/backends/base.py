"""The backend protocol: batch-first async model calls on numpy tensors."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np


class BackendError(RuntimeError):
    """A model call failed. ``reason`` is a stable label for metrics (``unknown_model``, ``bad_input``,
    ``runtime``)."""

    def __init__(self, model: str, reason: str, message: str) -> None:
        super().__init__(f"model {model!r}: {message}")
        self.model = model
        self.reason = reason


@runtime_checkable
class Backend(Protocol):
    """Runs the repository's models. Inputs and outputs are keyed by the manifest's tensor names. A
    backend whose ``infer`` also takes ``outputs`` (the embedded one, Triton) returns only those
    (``infer_outputs``): a step with top-k outputs then copies no whole log-prob rows."""

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    async def close(self) -> None: ...


def backend_devices(backend: object) -> Mapping[str, str]:
    """Model name -> the device its calls run on (``cuda``, ``cpu``), as the backend found it (the
    embedded backend: each session's providers; Triton: each model's instance kind as the server
    reports it); empty where a backend does not say (``GET /v1/models``, ``/healthz``)."""
    devices = getattr(backend, "devices", None)
    return devices if isinstance(devices, Mapping) else {}


async def infer_outputs(
    backend: Backend, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str]
) -> dict[str, np.ndarray]:
    """``outputs`` of ``model`` on ``inputs``: asked of the backend where its ``infer`` takes ``outputs``
    (then only those are computed out and copied), else all of them, of which these are kept."""
    if _takes_outputs(type(backend)):
        return await backend.infer(model, inputs, outputs=outputs)  # type: ignore[call-arg]
    out = await backend.infer(model, inputs)
    return {name: out[name] for name in outputs}


@functools.cache
def _takes_outputs(kind: type[Backend]) -> bool:
    """Whether ``kind.infer`` takes ``outputs`` (read once per backend class, not once per step)."""
    return "outputs" in inspect.signature(kind.infer).parameters
