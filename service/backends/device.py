"""Which device the embedded backend's models run on (``COMPCAP_DEVICE``), and the truth about it.

onnxruntime's CUDA build lists ``CUDAExecutionProvider`` in ``get_available_providers()`` whether or
not its CUDA libraries load; where they do not, every session silently runs on the CPU provider (one
error line from onnxruntime, nothing raised) — even a session asked for CUDA alone. So the device a
model runs on is read from its session (``get_providers()``), never from what was asked, and
``cuda_problem`` says why CUDA cannot be used before anything is loaded.

CUDA computes FP32 products in TF32 by default (max |CPU − CUDA| 2.3e-3 on the shipped models, 20 of
183 pinned captions changed; 7.6e-6 and none with it off, measured on an H200): ``provider_options``
turns it off unless the precision served allows it."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

# where the embedded backend runs the models (COMPCAP_DEVICE; this module says what it got)
Device = Literal["auto", "cpu", "cuda"]

DEVICES: tuple[str, ...] = get_args(Device)
CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
# what a session's first provider means for the device its model runs on
PROVIDER_DEVICES = {CUDA_PROVIDER: "cuda", "TensorrtExecutionProvider": "cuda", CPU_PROVIDER: "cpu"}
CUDA_LIBRARY = "libonnxruntime_providers_cuda.so"  # in onnxruntime/capi of the CUDA build


class DeviceError(ValueError):
    """``COMPCAP_DEVICE=cuda`` where CUDA cannot be used (the message names the setting and why)."""


def check_device(device: str) -> Device:
    """``device`` as a ``Device``; ``ValueError`` naming the setting otherwise."""
    if device not in DEVICES:
        raise ValueError(f"COMPCAP_DEVICE={device!r}: expected one of {', '.join(DEVICES)}")
    return device  # type: ignore[return-value]


def provider_options(device: str, available: Sequence[str], tf32: bool = False) -> list[Any]:
    """The providers a session asks for on ``device``: CUDA first (with TF32 ``tf32``; off keeps CPU's
    captions) where ``available`` has it and ``device`` is not cpu, the CPU provider always."""
    check_device(device)
    chain: list[Any] = []
    if device != "cpu" and CUDA_PROVIDER in available:
        chain.append((CUDA_PROVIDER, {"use_tf32": "1" if tf32 else "0"}))
    return [*chain, CPU_PROVIDER]


def session_device(session_providers: Sequence[str]) -> str:
    """The device a session runs its model on, from its ``get_providers()`` (first = preferred)."""
    if not session_providers:
        return "cpu"
    return PROVIDER_DEVICES.get(session_providers[0], session_providers[0])


def summary(devices: Mapping[str, str]) -> str:
    """One word for a set of models: their device when all share one, else ``mixed``; ``none``
    without models (``GET /v1/models`` ``device``, ``/healthz``)."""
    found = set(devices.values())
    if not found:
        return "none"
    return found.pop() if len(found) == 1 else "mixed"


def cuda_library_problem(capi: Path) -> str | None:
    """Why the CUDA provider's library under ``capi`` cannot load (the missing library, as the dynamic
    loader says), or ``None`` when it loads."""
    library = capi / CUDA_LIBRARY
    if not library.is_file():
        return f"this onnxruntime has no {CUDA_LIBRARY} (install the GPU build: requirements-serve-gpu.lock)"
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return f"onnxruntime's CUDA provider cannot load: {exc}"
    return None


def cuda_problem() -> str | None:
    """Why sessions could not run on CUDA here (``None``: they can): no CUDA build of onnxruntime, its
    CUDA provider's libraries missing, or no device a session could use (tried on a one-node graph)."""
    import onnxruntime as ort

    if CUDA_PROVIDER not in ort.get_available_providers():
        return (
            f"this onnxruntime ({ort.__version__}) has no {CUDA_PROVIDER}: install the GPU build "
            "(requirements-serve-gpu.lock) instead of onnxruntime"
        )
    preload(ort)
    problem = cuda_library_problem(Path(ort.__file__).parent / "capi")
    if problem is not None:
        return problem
    session = ort.InferenceSession(_identity_graph(), providers=provider_options("cuda", [CUDA_PROVIDER]))
    if session_device(session.get_providers()) != "cuda":
        return "the CUDA provider loaded but a session could not use it (no CUDA device? see nvidia-smi)"
    return None


def cuda_problem_in_child(timeout_s: float = 120.0) -> str | None:
    """``cuda_problem`` asked in a short-lived child process: the answer without a CUDA context in this
    one. The split's parent (``--api-processes`` > 1) loads no model; a context it opened to check would
    hold GPU memory (hundreds of MB) beside the engine core's for as long as the server runs."""
    import json
    import subprocess
    import sys

    script = "import json\nfrom service.backends.device import cuda_problem as p\nprint(json.dumps(p()))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return f"checking CUDA took over {timeout_s:.0f} s (a hung driver?)"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"the check could not run: {tail}"
    answer = json.loads(lines[-1])
    return None if answer is None else str(answer)


def preload(ort: Any) -> None:
    """Load the CUDA and cuDNN libraries of the ``nvidia-*`` wheels (requirements-serve-gpu.lock) so that
    onnxruntime's CUDA provider finds them without ``LD_LIBRARY_PATH``; a no-op where they are absent."""
    loader = getattr(ort, "preload_dlls", None)
    if loader is None:
        return
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # it prints where a library is missing
        try:
            loader(cuda=True, cudnn=True, msvc=False)
        except Exception:  # a failed preload shows as the provider's own load problem below
            return


def _identity_graph() -> bytes:
    """A serialised one-node ONNX graph (``y = Identity(x)``, float [1]), built without the onnx package
    (the serve image has only onnxruntime): protobuf wire format by hand."""

    def field(number: int, wire: int, payload: bytes) -> bytes:
        return _varint(number << 3 | wire) + (_varint(len(payload)) + payload if wire == 2 else payload)

    def text(number: int, value: str) -> bytes:
        return field(number, 2, value.encode())

    def value_info(name: str) -> bytes:
        dim = field(1, 2, field(1, 0, _varint(1)))  # TensorShapeProto.dim { dim_value: 1 }
        tensor = field(1, 0, _varint(1)) + field(2, 2, dim)  # elem_type FLOAT, shape
        return text(1, name) + field(2, 2, field(1, 2, tensor))  # ValueInfoProto {name, type {tensor}}

    node = text(1, "x") + text(2, "y") + text(4, "Identity")
    graph = field(1, 2, node) + text(2, "probe")
    graph += field(11, 2, value_info("x")) + field(12, 2, value_info("y"))
    opset = field(2, 0, _varint(13))
    return field(1, 0, _varint(8)) + field(8, 2, opset) + field(7, 2, graph)  # ir_version 8, opset 13


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
