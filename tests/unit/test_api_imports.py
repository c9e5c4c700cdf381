"""The API package's module graph: no import circle (``TYPE_CHECKING`` imports included), and only
``deps`` and ``app`` touch ``app.state`` — routes get the runtime and engine as dependencies."""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "service" / "api"


def api_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[2] for n in names if n.startswith("service.api.") and len(n.split(".")) > 2}
    return found


def graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in API.glob("*.py") if p.stem != "__init__"}
    return {name: api_imports(path) & set(modules) for name, path in modules.items()}


def test_no_import_circle_in_the_api_package() -> None:
    edges = graph()
    assert edges["app"] >= {"deps", "routes"} and "deps" in edges["routes"]
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


def test_only_deps_and_app_touch_app_state() -> None:
    touching = {p.stem for p in API.glob("*.py") if "app.state" in p.read_text(encoding="utf-8")}
    assert touching <= {"deps", "app"}, touching
