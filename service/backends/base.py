"""The backend protocol: batch-first async model calls on numpy tensors."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


class BackendError(RuntimeError):
    """A model call failed. ``reason`` is a stable label for metrics (``unknown_model``, ``bad_input``,
    ``runtime``)."""

    def __init__(self, model: str, reason: str, message: str) -> None:
        super().__init__(f"model {model!r}: {message}")
        self.model = model
        self.reason = reason


@dataclass(frozen=True, eq=False)
class DeviceArray:
    """An output a backend kept on its model's device (asked with ``infer_outputs``' ``keep``): ``value``
    is the backend's own (an onnxruntime ``OrtValue``), passed back as an input of the same backend
    without a copy; ``numpy()`` copies it to the host. The engine keeps the decoder state this way
    between step calls (model contract v3, ``service.engine.state_rows``)."""

    value: Any
    shape: tuple[int, ...]
    to_host: Callable[[], np.ndarray]

    def numpy(self) -> np.ndarray:
        return np.asarray(self.to_host())


def host_array(value: np.ndarray | DeviceArray) -> np.ndarray:
    """``value`` on the host (a ``DeviceArray`` copied there; an array as it is)."""
    return value.numpy() if isinstance(value, DeviceArray) else value


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
    backend: Backend,
    model: str,
    inputs: Mapping[str, np.ndarray | DeviceArray],
    outputs: Sequence[str],
    keep: Sequence[str] = (),
) -> dict[str, Any]:
    """``outputs`` of ``model`` on ``inputs``: asked of the backend where its ``infer`` takes ``outputs``
    (then only those are computed out and copied), else all of them, of which these are kept.
    ``keep``: outputs to leave on the model's device as ``DeviceArray`` s, where the backend's ``infer``
    takes ``keep`` (the embedded one); others return them as arrays. ``DeviceArray`` inputs go to a
    backend that takes ``keep`` as they are, to another as host copies."""
    if keep and _takes(type(backend), "keep"):
        return await backend.infer(model, inputs, outputs=outputs, keep=keep)  # type: ignore[call-arg, arg-type]
    host = {name: host_array(value) for name, value in inputs.items()}
    if _takes(type(backend), "outputs"):
        return await backend.infer(model, host, outputs=outputs)  # type: ignore[call-arg]
    out = await backend.infer(model, host)
    return {name: out[name] for name in outputs}


@functools.cache
def _takes(kind: type[Backend], parameter: str) -> bool:
    """Whether ``kind.infer`` takes ``parameter`` (read once per backend class, not once per step)."""
    return parameter in inspect.signature(kind.infer).parameters
