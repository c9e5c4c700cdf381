"""The backend registry: what ``COMPCAP_BACKEND`` may name, and how each backend is built.

A backend is one registered record (``BackendRecord``): its name, what it is, the settings it
reads, the extra its third-party packages come with and the modules those packages provide, and
``build``, the async factory that loads it from the engine's settings. The built-in backends'
records are declared here (``onnxruntime``, embedded; ``triton``; ``null``), each ``build`` being its
module's (``service.backends.onnxruntime.backend``, ``service.backends.triton.backend``,
``service.backends.null``), imported when it is first built: validating the settings asks
``importlib.util.find_spec`` whether a backend's packages are installed, so a process that loads no
model (the split's parent, its API processes) imports neither onnxruntime nor tritonclient, and a
backend whose package is missing is refused there, naming the package and the extras that provide it.
A backend defined elsewhere (a test, a deployment's own module) is registered by importing its module
before the settings are read (``register``, or ``@backend(name, description, ...)`` on its ``build``).

Adding a built-in backend is its module here (the class and its ``build``), its record below, its
test and a line in docs/architecture.md. One with third-party packages also needs an extra in
``pyproject.toml`` and the packages pinned in the locks (``requirements-serve.lock``); one with knobs
of its own is a package (``service/backends/<name>/``: its ``backend`` module and its ``settings``
section, joined to the others in ``service/backends/settings.py``) and names its fields in its record's
``settings``."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from service.backends.base import Backend
from service.backends.triton.url import triton_target
from service.manifest import Manifest
from service.metrics import Metrics

# the settings are the engine's and the backends' sections (service.engine.settings.CoreSettings), typed
# loosely here: the registry sits below them, and they validate COMPCAP_BACKEND against it
Build = Callable[[Any, Manifest, Metrics], Awaitable[Backend]]


@dataclass(frozen=True)
class BackendRecord:
    """One backend: ``name`` (the ``COMPCAP_BACKEND`` value), ``description`` (one line), ``build``
    (``await build(settings, manifest, metrics)``: the backend loaded and ready to serve), ``settings``
    (the settings it reads besides ``repo`` and ``precision``: its own section's), ``extra`` (the
    ``compcap[...]`` extra its third-party packages come with; None: none needed), ``check`` (run on the
    engine's and the backends' settings when they are validated: a ``ValueError`` naming the setting at
    fault), ``requires`` (the top-level modules of those packages: the backend is servable where
    ``find_spec`` finds them all)."""

    name: str
    description: str
    build: Build
    settings: tuple[str, ...] = ()
    extra: str | None = None
    check: Callable[[Any], None] | None = None
    requires: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"name: a backend's name is lower-case letters, digits and _, got {self.name!r}")
        if any("." in module for module in self.requires):
            raise ValueError(
                f"requires: top-level modules, got {self.requires} (find_spec imports a dotted one's parents)"
            )


BACKENDS: dict[str, BackendRecord] = {}
_PACKAGE = __name__.rpartition(".")[0]  # service.backends


def register(record: BackendRecord) -> BackendRecord:
    """Add ``record``; a name registered already is refused (``ValueError``)."""
    if record.name in BACKENDS:
        raise ValueError(f"backend {record.name!r} is registered already")
    BACKENDS[record.name] = record
    return record


def backend(
    name: str,
    description: str,
    *,
    settings: tuple[str, ...] = (),
    extra: str | None = None,
    check: Callable[[Any], None] | None = None,
    requires: tuple[str, ...] = (),
) -> Callable[[Build], Build]:
    """Register the decorated ``build`` as the backend ``name`` (``BackendRecord``'s fields)."""

    def add(build: Build) -> Build:
        register(BackendRecord(name, description, build, settings, extra, check, requires))
        return build

    return add


def unregister(name: str) -> None:
    """Remove the backend ``name`` (a no-op when it is not registered)."""
    BACKENDS.pop(name, None)


def missing_package(name: str, module: str) -> ValueError:
    """The error of backend ``name`` whose package providing ``module`` is not installed."""
    extras = extras_providing(module)
    hint = f": install {' or '.join(f'compcap[{e}]' for e in extras)}" if extras else ""
    return ValueError(f"backend {name!r} needs {module!r}, which is not installed{hint}")


def _missing(record: BackendRecord) -> str | None:
    """The first of ``record.requires`` that is not installed (None: it is servable here)."""
    return next((m for m in record.requires if importlib.util.find_spec(m) is None), None)


def backend_names() -> tuple[str, ...]:
    """Every backend servable here: the registered ones whose packages are installed."""
    return tuple(sorted(name for name, record in BACKENDS.items() if _missing(record) is None))


def get_backend(name: str) -> BackendRecord:
    """The record of ``name``, its packages installed (found, not imported); a ``ValueError`` names the
    setting and the servable backends, or the missing package and the extras that provide it."""
    record = BACKENDS.get(name)
    if record is None:
        raise ValueError(f"COMPCAP_BACKEND: unknown backend {name!r}; backends: {', '.join(backend_names())}")
    missing = _missing(record)
    if missing is not None:
        raise missing_package(name, missing)
    return record


def extras_providing(module: str) -> list[str]:
    """The ``compcap`` extras whose packages provide the top-level module ``module`` (its installed
    metadata: ``onnxruntime`` is in ``cpu`` and ``gpu``'s ``onnxruntime-gpu``), sorted; empty when the
    distribution is not installed."""
    try:
        requirements = importlib.metadata.requires("compcap") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    top = module.split(".")[0].replace("_", "-").lower()
    found = set()
    for line in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.-]+).*extra\s*==\s*['\"]([^'\"]+)['\"]", line)
        name = match[1].lower().replace("_", "-") if match else ""
        if match and (name == top or name.startswith(top + "-")):
            found.add(match[2])
    return sorted(found)


async def make_backend(settings: Any, manifest: Manifest, metrics: Metrics) -> Backend:
    """The backend ``settings.backend`` names (the engine's section), loaded and ready to serve."""
    return await get_backend(settings.backend).build(settings, manifest, metrics)


def _module_build(name: str, module_name: str | None = None) -> Build:
    """The ``build`` of the module ``service.backends.<module_name>`` (default: ``<name>``), imported
    when it is first called."""

    async def build(settings: Any, manifest: Manifest, metrics: Metrics) -> Backend:
        try:
            module = importlib.import_module(f"{_PACKAGE}.{module_name or name}")
        except ImportError as exc:  # installed, yet a package it needs in turn is not
            raise missing_package(name, exc.name or str(exc)) from exc
        made: Backend = await module.build(settings, manifest, metrics)
        return made

    return build


def _check_triton(settings: Any) -> None:
    """``triton_url`` in one of its forms, one address where tensors go in shared memory."""
    triton_target(settings.triton_url, settings.triton_shared_memory)


register(
    BackendRecord(
        "onnxruntime",
        "the embedded default: onnxruntime sessions in this process, run off the event loop",
        _module_build("onnxruntime", "onnxruntime.backend"),
        settings=("intra_op_threads", "executor_threads", "ort_spinning", "device"),
        extra="cpu",  # or gpu: onnxruntime's CUDA build, the same module
        requires=("onnxruntime",),
    )
)
register(
    BackendRecord(
        "triton",
        "Triton Inference Servers at triton_url, called over gRPC",
        _module_build("triton", "triton.backend"),
        settings=("triton_url", "triton_resolve_s", "triton_startup_s", "triton_shared_memory"),
        extra="triton",
        check=_check_triton,
        requires=("tritonclient",),
    )
)
register(
    BackendRecord(
        "null",
        "no models: outputs of the right shapes at zero cost whose captions end but mean nothing; it "
        "measures the gateway's own ceiling, `compcap bench --backend null`",
        _module_build("null"),
    )
)
