"""The backend registry (``service.backends.registry``): the three built-in backends are declared there,
each record names settings the engine's and the backends' sections have, an extra ``pyproject.toml``
declares and the modules that extra provides, and its build is its module's; a name is registered once
and spelled as a module name; a backend whose package is missing names the extras that provide it, and
validating the settings imports no backend's package. (A backend defined and served from a test:
tests/api.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
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
from service.engine.settings import CoreSettings

ROOT = Path(__file__).resolve().parents[3]


def test_the_built_in_backends_are_declared_with_what_they_need() -> None:
    assert {"onnxruntime", "triton", "null"} <= set(backend_names())
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    for name in ("onnxruntime", "triton", "null"):
        record = get_backend(name)
        assert record.name == name and record.description
        assert set(record.settings) <= set(CoreSettings.model_fields), record.settings
        assert record.extra is None or record.extra in extras, record.extra
        assert all(record.extra in extras_providing(module) for module in record.requires), record.requires
        assert bool(record.requires) == bool(record.extra), record


def test_a_backend_whose_package_is_missing_names_it_and_is_not_listed() -> None:
    async def build(settings: object, manifest: object, metrics: object) -> NullBackend:
        raise AssertionError("not built here")

    register(BackendRecord("elsewhere", "needs a package", build, requires=("no_such_package",)))
    try:
        with pytest.raises(
            ValueError, match=r"backend 'elsewhere' needs 'no_such_package', which is not installed$"
        ):
            get_backend("elsewhere")
        assert "elsewhere" not in backend_names()
    finally:
        unregister("elsewhere")
    with pytest.raises(ValueError, match="requires: top-level modules"):
        BackendRecord("dotted", "bad", build, requires=("tritonclient.grpc",))


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


@pytest.mark.parametrize(
    ("backend", "package", "env"),
    [
        ("onnxruntime", "onnxruntime", {}),
        (
            "triton",
            "tritonclient",
            {"COMPCAP_TRITON_URL": "127.0.0.1:8001", "COMPCAP_TRITON_SHARED_MEMORY": "true"},
        ),
    ],
)
def test_validating_the_settings_imports_no_backend_package(
    backend: str, package: str, env: dict[str, str], tmp_path: Path
) -> None:
    """The split's parent (``compcap serve --api-processes N``) validates ``COMPCAP_BACKEND`` and loads no
    model: a fresh interpreter's settings leave the backend's package unimported (found, not loaded)."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed here")
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    code = (
        "import sys\nfrom service.settings import Settings\n"
        f"assert Settings(repo={str(tmp_path)!r}, state_url='').backend == {backend!r}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnxruntime', 'tritonclient')))"
    )
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "COMPCAP_BACKEND": backend, **env}
    run = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout
