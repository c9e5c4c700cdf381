"""The module graphs of the HTTP kit (``service/api``) and the gateway (``service/gateway``): no import
circle inside either (``TYPE_CHECKING`` imports included); in the kit only ``deps`` touches ``app.state``
and in the gateway only ``app`` — routes get the runtime and engine as dependencies."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[3] / "service"


def package_imports(path: Path, package: str) -> set[str]:
    """The modules of ``service.<package>`` that ``path`` imports (their short names)."""
    prefix = f"service.{package}."
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[2] for n in names if n.startswith(prefix) and len(n.split(".")) > 2}
    return found


def graph(package: str) -> dict[str, set[str]]:
    modules = {p.stem: p for p in (SERVICE / package).glob("*.py") if p.stem != "__init__"}
    return {name: package_imports(path, package) & set(modules) for name, path in modules.items()}


@pytest.mark.parametrize("package", ["api", "gateway"])
def test_no_import_circle_in_the_package(package: str) -> None:
    edges = graph(package)
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(" -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for target in sorted(edges[name]):
            visit(target, [*path, name])
        done.add(name)

    for module in sorted(edges):
        visit(module, [])


def test_the_gateway_mounts_its_routes_and_the_features() -> None:
    assert graph("gateway")["app"] >= {"routes", "features"}
    assert graph("api")["feature"] >= {"deps"}


@pytest.mark.parametrize(("package", "allowed"), [("api", {"deps"}), ("gateway", {"app"})])
def test_only_deps_and_app_touch_app_state(package: str, allowed: set[str]) -> None:
    touching = {
        p.stem for p in (SERVICE / package).glob("*.py") if "app.state" in p.read_text(encoding="utf-8")
    }
    assert touching <= allowed, touching
