"""The backend registry: what ``COMPCAP_BACKEND`` may name, and how each backend is built.

A backend is one registered record (``BackendRecord``): its name, what it is, the engine settings it
reads, the extra its third-party packages come with, and ``build``, the async factory that loads it
from the engine's settings. Each backend module registers its own at import, as a hook is registered
(``@backend(name, description, ...)`` on its ``build``): ``onnxruntime`` (embedded), ``triton`` and
``null``.

A backend named ``X`` is found in the module ``service.backends.X``, imported when ``X`` is first
asked for (``get_backend``): a deployment that serves Triton imports no onnxruntime, and a backend whose
third-party package is missing fails there, naming the package and the extras that provide it. A backend
defined elsewhere (a test, a deployment's own module) is registered by importing its module before the
settings are read.

Adding a backend is its module here (the class, its ``build``, its record), its test and a line in
docs/backends.md. One with third-party packages also needs an extra in ``pyproject.toml`` and the packages
pinned in the locks (``requirements-serve.lock``); one with knobs of its own adds its fields to the
engine's section (``service/sections.py``) and names them in its record's ``settings``."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from service.backends.base import Backend
from service.manifest import Manifest
from service.metrics import Metrics

# the settings are the engine's section (service.sections.EngineSettings), typed loosely here: the
# backends sit below the settings, which validate COMPCAP_BACKEND against this registry
Build = Callable[[Any, Manifest, Metrics], Awaitable[Backend]]


@dataclass(frozen=True)
class BackendRecord:
    """One backend: ``name`` (the ``COMPCAP_BACKEND`` value), ``description`` (one line), ``build``
    (``await build(settings, manifest, metrics)``: the backend loaded and ready to serve), ``settings``
    (the engine settings it reads besides ``repo`` and ``precision``), ``extra`` (the ``compcap[...]``
    extra its third-party packages come with; None: none needed), ``check`` (run on the engine's
    settings when they are validated: a ``ValueError`` naming the setting at fault)."""

    name: str
    description: str
    build: Build
    settings: tuple[str, ...] = ()
    extra: str | None = None
    check: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"name: a backend's name is lower-case letters, digits and _, got {self.name!r}")


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
) -> Callable[[Build], Build]:
    """Register the decorated ``build`` as the backend ``name`` (``BackendRecord``'s fields)."""

    def add(build: Build) -> Build:
        register(BackendRecord(name, description, build, settings, extra, check))
        return build

    return add


def unregister(name: str) -> None:
    """Remove the backend ``name`` (a no-op when it is not registered)."""
    BACKENDS.pop(name, None)


def _load(name: str) -> None:
    """Import ``service.backends.<name>`` where it exists (it registers its record)."""
    module = f"{_PACKAGE}.{name}"
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or importlib.util.find_spec(module) is None:
        return
    try:
        importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or str(exc)
        extras = extras_providing(missing)
        hint = f": install {' or '.join(f'compcap[{e}]' for e in extras)}" if extras else ""
        raise ValueError(f"backend {name!r} needs {missing!r}, which is not installed{hint}") from exc


def backend_names() -> tuple[str, ...]:
    """Every backend that can be named here: the registered ones and those of ``service.backends``
    whose modules import (a module without a record is not a backend)."""
    for info in pkgutil.iter_modules(importlib.import_module(_PACKAGE).__path__):
        try:
            importlib.import_module(f"{_PACKAGE}.{info.name}")
        except ImportError:  # its third-party package is missing: not servable here
            continue
    return tuple(sorted(BACKENDS))


def get_backend(name: str) -> BackendRecord:
    """The record of ``name``; a ``ValueError`` names the setting and the known backends."""
    if name not in BACKENDS:
        _load(name)
    if name not in BACKENDS:
        raise ValueError(f"COMPCAP_BACKEND: unknown backend {name!r}; backends: {', '.join(backend_names())}")
    return BACKENDS[name]


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
