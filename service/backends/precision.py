"""Serving a repository at another precision (``COMPCAP_PRECISION``) on a backend that calls its models
by name (Triton): the engine keeps calling the FP32 names of the manifest, and each call goes to the
model that serves that name (``Manifest.served_models``: the int8 or fp16 variant, where its set passed
its gate). The embedded backend needs no wrapper: it loads the variant's file under the FP32 name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from service.backends.base import Backend, backend_devices, infer_outputs


class ServedNames:
    """A ``Backend`` that calls ``served[model]`` on ``inner`` for ``model`` (unlisted names as they are)."""

    def __init__(self, inner: Backend, served: Mapping[str, str], precision: str) -> None:
        self.inner, self.served, self.precision = inner, dict(served), precision

    @property
    def devices(self) -> Mapping[str, str]:
        """The inner backend's devices, under the FP32 names the engine calls."""
        inner = backend_devices(self.inner)
        return {model: inner[served] for model, served in self.served.items() if served in inner}

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        served = self.served.get(model, model)
        if outputs is None:
            return await self.inner.infer(served, inputs)
        return await infer_outputs(self.inner, served, inputs, outputs)

    async def close(self) -> None:
        await self.inner.close()
