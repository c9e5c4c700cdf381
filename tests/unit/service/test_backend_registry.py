"""The backend registry (``service.backends.registry``): the three built-in backends are found by name
in their modules, each record names settings the engine's section has and an extra ``pyproject.toml``
declares; a name is registered once and spelled as a module name; a backend whose package is missing
names the extras that provide it. (A backend defined and served from a test: tests/api.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from service.backends.null import NullBackend
from service.backends.registry import (
    BACKENDS,
    BackendRecord,
    backend_names,
    extras_providing,
    get_backend,
    register,
    unregister,
)
from service.sections import EngineSettings

ROOT = Path(__file__).resolve().parents[3]


def test_the_built_in_backends_are_registered_by_their_modules() -> None:
    assert {"onnxruntime", "triton", "null"} <= set(backend_names())
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    for name in ("onnxruntime", "triton", "null"):
        record = get_backend(name)
        assert record.name == name and record.description
        assert set(record.settings) <= set(EngineSettings.model_fields), record.settings
        assert record.extra is None or record.extra in extras, record.extra


def test_a_name_is_registered_once_and_spelled_as_a_module() -> None:
    async def build(settings: object, manifest: object, metrics: object) -> NullBackend:
        raise AssertionError("not built here")

    with pytest.raises(ValueError, match="registered already"):
        register(BackendRecord("null", "again", build))
    with pytest.raises(ValueError, match="name: a backend's name"):
        BackendRecord("Not-A-Module", "bad", build)
    record = register(BackendRecord("scratch", "registered and removed", build))
    try:
        assert get_backend("scratch") is record
    finally:
        unregister("scratch")
    assert "scratch" not in BACKENDS
    unregister("scratch")  # a no-op


def test_an_unknown_name_lists_the_known() -> None:
    for name in ("nothing", "registry", "../null"):  # a module that registers no backend is none
        with pytest.raises(ValueError, match=r"COMPCAP_BACKEND: unknown backend .*; backends: null, "):
            get_backend(name)


def test_the_extras_that_provide_a_package_come_from_the_installed_metadata() -> None:
    assert "triton" in extras_providing("tritonclient")
    assert {"cpu", "gpu"} <= set(extras_providing("onnxruntime"))
    assert extras_providing("no_such_package") == []
