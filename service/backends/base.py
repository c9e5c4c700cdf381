"""The backend protocol: batch-first async model calls on numpy tensors."""

from __future__ import annotations

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
    """Runs the repository's models. Inputs and outputs are keyed by the manifest's tensor names."""

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    async def close(self) -> None: ...
