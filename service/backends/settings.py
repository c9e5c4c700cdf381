"""The built-in backends' sections together (``BackendSettings``), each in its backend's package
(``service/backends/onnxruntime/settings.py``, ``service/backends/triton/settings.py``; the null backend
has none). The engine's settings join them to its own section (``service.engine.settings.CoreSettings``,
which also runs the chosen backend's check of them). A backend with knobs of its own adds its section in
its package, among these bases, and names its fields in its record (``service.backends.registry``)."""

from __future__ import annotations

from service.backends.onnxruntime.settings import OnnxruntimeSettings
from service.backends.triton.settings import TritonSettings
from service.sections import Section


class BackendSettings(TritonSettings, OnnxruntimeSettings):
    """Every built-in backend's section, one base per backend, listed last backend first (the fields then
    come onnxruntime, Triton)."""


BACKEND_SECTIONS: tuple[type[Section], ...] = tuple(reversed(BackendSettings.__bases__))
