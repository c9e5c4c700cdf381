"""The embedded backend's section (``COMPCAP_DEVICE``, ``COMPCAP_INTRA_OP_THREADS``,
``COMPCAP_ORT_SPINNING``, ``COMPCAP_EXECUTOR_THREADS``): where and how its onnxruntime sessions run. Its
record (``service.backends.registry``) names these fields; ``service.backends.settings`` joins it to
the other backends' sections. Imports no onnxruntime."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from service.backends.device import Device
from service.sections import Section


class OnnxruntimeSettings(Section):
    """The onnxruntime backend's section: the device its models run on, and its threads."""

    title: ClassVar[str] = "onnxruntime backend"

    intra_op_threads: int = Field(
        default=0,
        ge=0,
        le=256,
        description="onnxruntime intra-op threads per model call; 0 = auto: every core of the process for "
        "each call of a heavy model (64 MiB of weights or more, e.g. an imported ViT + GPT-2: a lone "
        "request's calls run 1.5-1.8x faster), the cores divided by executor_threads (at least 1) for a "
        "light one (its sub-millisecond calls gain nothing from more threads and pay for waking them)",
    )
    ort_spinning: bool = Field(
        default=False,
        description="let idle onnxruntime pool threads spin: faster for one caller, much slower when "
        "step, encoder and ranker calls share the cores (2.5x fewer captions/s at 32 clients on 2 cores)",
    )
    executor_threads: int = Field(
        default=4, ge=1, le=64, description="threads that run model calls off the loop"
    )
    device: Device = Field(
        default="auto",
        description="where the embedded backend runs the models: auto (CUDA where onnxruntime's CUDA "
        "provider loads and a device answers, else the CPU), cpu, or cuda (where CUDA cannot be used, "
        "`compcap serve` exits naming the reason instead of falling back). The device each model got is "
        "in the start-up log, GET /v1/models, /healthz and compcap_model_device_info",
    )
