"""The layering of ``service/``, checked on the source (AST of every module, imports at any level, inside
functions and under ``if TYPE_CHECKING:`` included): service never imports export, loadtests or torch
(docs/architecture.md: the one-way contract is model_repo/manifest.json); the HTTP kit
(``service/api/``) never imports a feature package or the gateway above them; below the command line
nothing imports the gateway; every feature package exposes ``install``; the engine knows nothing of the
API or the feature packages; each settings section lives in the package that owns it, the base of the
sections imports nothing of the service, and the engine's settings nothing of the gateway, the kit, the
shared state, the image URL policy or the command line; each backend's options live in that backend's
package; the backends know nothing of the engine or the API; and no import cycle among the modules of
``service/``. The service must also import without torch (checked in a fresh interpreter)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SERVICE = ROOT / "service"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def service_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SERVICE.rglob("*.py"))}


def import_statements(module: str, path: Path) -> Iterator[tuple[str, list[str]]]:
    """(base, names) of every import statement of a module, at any level: ``import a.b`` is ``("a.b",
    [])``, ``from a import b, c`` is ``("a", ["b", "c"])``; relative bases are resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            yield base, [alias.name for alias in node.names]


def imported_names(module: str, path: Path) -> set[str]:
    """The modules (or packages) a module imports from, as written: the bases of its import statements."""
    return {base for base, _ in import_statements(module, path)}


def service_imports(module: str) -> set[str]:
    """The modules of ``service/`` that ``module`` imports: ``from service.x import y`` is ``service.x.y``
    when that is a module, else ``service.x``."""
    known = service_modules()
    out: set[str] = set()
    for base, names in import_statements(module, known[module]):
        for name in names or [None]:
            target = f"{base}.{name}" if name and f"{base}.{name}" in known else base
            if target in known and target != module:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    return {module: service_imports(module) for module in service_modules()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [c for c in strongly_connected(graph) if len(c) > 1]


def reachable(module: str) -> set[str]:
    """Every module of ``service/`` that importing ``module`` may import, at any depth (itself excluded)."""
    graph = import_graph()
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen - {module}


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def offenders(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    """``module: import`` for every import by a module under ``prefix`` of a name under ``forbidden``."""
    found = []
    for module, path in service_modules().items():
        if module == prefix or module.startswith(prefix + "."):
            for name in imported_names(module, path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    found.append(f"{module}: {name}")
    return sorted(found)


# -- the checker itself ------------------------------------------------------------------------------


def test_reachable_follows_imports_at_any_depth() -> None:
    assert "service.sections" in reachable("service.settings")  # through every section
    assert reachable("service.sections") == set()


def test_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_are_found_inside_functions_and_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from service.api.app import Runtime\n"
        "def f():\n    import compcap_lab.pipeline.zoo\n    from . import sibling\n"
    )
    statements = list(import_statements("service.engine.m", source))
    assert ("service.api.app", ["Runtime"]) in statements and ("compcap_lab.pipeline.zoo", []) in statements
    assert ("service.engine", ["sibling"]) in statements


# -- the layering --------------------------------------------------------------------------------


TORCH_MODULES = {"service.explain.gradients"}  # the gradient explanations: the optional `explain` extra
FEATURES = ("service.probes", "service.explain", "service.compare")
GATEWAY = "service.gateway"  # the composition root: mounts the kit, the caption routes and the features


def test_service_sources_never_import_export_loadtests_or_torch() -> None:
    assert offenders("service", ("export", "sceneworld", "loadtests", "compcap_lab")) == []
    torch_users = {line.split(":")[0] for line in offenders("service", ("torch", "captum"))}
    assert torch_users <= TORCH_MODULES, torch_users - TORCH_MODULES
    # scipy (Hungarian coverage, an offline study metric) also comes with the extra, imported in the function
    assert {line.split(":")[0] for line in offenders("service", ("scipy",))} <= {"service.explain.grounding"}


def test_only_the_explain_package_reaches_the_torch_module() -> None:
    importers = {m for m, targets in import_graph().items() if targets & TORCH_MODULES}
    assert importers and all(m.startswith("service.explain") for m in importers), importers


def test_engine_knows_nothing_of_api_or_features() -> None:
    assert offenders("service.engine", ("service.api", GATEWAY, *FEATURES)) == []


def test_the_kit_never_imports_a_feature_or_the_gateway() -> None:
    """``service/api/`` is the HTTP kit every router uses; the gateway above it mounts the features."""
    assert offenders("service.api", (GATEWAY, *FEATURES)) == []


def test_text_and_evaluation_never_import_a_feature() -> None:
    """The vocabulary, the concept inventory and its word classes (``text``) and the metrics
    (``evaluation``) sit below the features that use them."""
    assert offenders("service.text", (GATEWAY, *FEATURES)) == []
    assert offenders("service.evaluation", (GATEWAY, *FEATURES)) == []


SECTION_MODULES = ("service.sections", "service.logs")  # the base; the logs' section beside their set-up
BACKENDS = "service.backends"


def is_section_module(module: str) -> bool:
    """A module that holds sections: a package's ``settings``, or one of ``SECTION_MODULES``."""
    return module in SECTION_MODULES or module.endswith(".settings")


def test_settings_never_import_a_feature() -> None:
    """The base of the sections (``service.sections``) imports nothing of the service; each section
    lives in the package that owns it and the collector (``service.settings``) reaches into the
    packages for their sections only: the features' ``settings`` (each of which imports nothing of
    ``service`` but the base), and the engine's, the backends', the kit's, the shared state's, the
    gateway's and the logs'. It reaches no feature's, the kit's, the engine's or the gateway's other
    modules."""
    assert service_imports("service.sections") == set()
    feature_sections = {f"{feature}.settings" for feature in FEATURES}
    reached = {line.split(": ")[1] for line in offenders("service.settings", FEATURES)}
    assert reached == feature_sections, reached
    for module in feature_sections:
        assert service_imports(module) == {"service.sections"}, module
    collected = service_imports("service.settings") - {"service.cli.errors"}  # UsageError: serve's report
    assert [m for m in sorted(collected) if not is_section_module(m)] == []
    owners = ("service.engine", "service.api", "service.state", GATEWAY, BACKENDS)
    assert {m.rsplit(".", 1)[0] for m in collected if under(m, owners)} == {*owners}, collected


def test_the_engines_settings_import_nothing_of_the_gateway_api_state_or_cli() -> None:
    """The engine's section (``service.engine.settings``) and everything it imports, at any depth,
    import nothing of the gateway, the HTTP kit, the shared state, the image URL policy, the command
    line, the features or the collected settings: the engine takes its settings without any of them
    (nor do the backends' sections it joins)."""
    forbidden = (GATEWAY, "service.api", "service.state", "service.cli", "service.images", "service.settings",
                 *FEATURES)  # fmt: skip
    for module in ("service.engine.settings", "service.backends.settings"):
        found = sorted(m for m in reachable(module) if under(m, forbidden))
        assert found == [], f"{module} reaches {found}"
        assert "service.sections" in reachable(module)  # so the check above reads real imports


def test_each_backends_options_live_in_its_package() -> None:
    """A built-in backend's options (its record's ``settings``) are fields of its own section, declared
    in its package (``service/backends/<name>/settings.py``) and in no other section; every field that
    module declares is named by the record; the engine's section declares none of them."""
    import service.settings  # noqa: F401  (every section class is defined once it is imported)
    from service.backends.registry import BACKENDS as RECORDS
    from service.engine.settings import EngineSettings
    from service.sections import Section

    def subclasses(cls: type[Section]) -> set[type[Section]]:
        return {cls} | {c for sub in cls.__subclasses__() for c in subclasses(sub)}

    declared: dict[str, list[str]] = {}  # field -> the modules of the sections that declare it
    for section in subclasses(Section):
        for name in vars(section).get("__annotations__", {}):
            if name in section.model_fields:
                declared.setdefault(name, []).append(section.__module__)
    built_in = {n: r for n, r in RECORDS.items() if r.build.__module__ == f"{BACKENDS}.registry"}
    assert {"onnxruntime", "triton", "null"} <= set(built_in)
    for name, record in built_in.items():
        package = f"{BACKENDS}.{name}.settings"
        assert all(declared.get(s) == [package] for s in record.settings), (name, record.settings)
        own = {f for f, modules in declared.items() if package in modules}
        assert own == set(record.settings), (name, own ^ set(record.settings))
        assert not set(record.settings) & set(vars(EngineSettings)["__annotations__"]), name
    assert built_in["onnxruntime"].settings and built_in["triton"].settings  # the check reads real options


def test_nothing_below_the_features_imports_the_collected_settings() -> None:
    """Only what sits above the features (the gateway, the command line) imports ``service.settings``,
    which imports every section: the kit, the engine, the backends and the features read their own
    sections."""
    importers = {m for m, targets in import_graph().items() if "service.settings" in targets}
    below = [m for m in importers if not under(m, (GATEWAY, "service.cli"))]
    assert below == [], below


def test_only_the_entry_points_import_the_gateway() -> None:
    """Features, kit and everything below never reach up to the app that mounts them: only the
    commands do (``compcap serve``, and ``compcap caption``'s body, which shapes its --json answer as
    the gateway does), and the collected settings, for the gateway's section alone."""
    lines = [line for line in offenders("service", (GATEWAY,)) if not line.startswith(f"{GATEWAY}.")]
    importers = {line.split(":")[0] for line in lines}
    assert importers <= {"service.cli.commands", "service.cli.caption_files", "service.settings"}, importers
    assert [line for line in lines if line.startswith("service.settings:")] == [
        "service.settings: service.gateway.settings"
    ]


def test_every_feature_is_a_package_with_an_install() -> None:
    """Each feature is a package whose ``feature`` module holds its ``install``; the package's
    ``__init__`` imports nothing, so its pure parts load without the HTTP layer."""
    from service.gateway.features import FEATURES as INSTALLED

    for feature in FEATURES:
        name = feature.split(".")[1]
        init = SERVICE / name / "__init__.py"
        assert init.is_file(), f"{feature} has no __init__.py"
        assert service_imports(feature) == set(), f"{feature}/__init__.py imports {service_imports(feature)}"
        assert INSTALLED[name] == f"{feature}.feature"
        assert callable(importlib.import_module(f"{feature}.feature").install)


def test_backends_know_nothing_of_engine_or_api() -> None:
    """Nor of the gateway, the shared state, the command line or the collected settings, which validate
    ``COMPCAP_BACKEND`` against the backends' registry; only their own sections import the sections'
    base."""
    forbidden = ("service.engine", "service.api", GATEWAY, "service.state", "service.cli", "service.settings")
    assert offenders(BACKENDS, forbidden) == []
    importers = {line.split(":")[0] for line in offenders(BACKENDS, ("service.sections",))}
    assert importers and all(m.endswith(".settings") for m in importers), importers


def test_no_import_cycle_among_service_modules() -> None:
    """``if TYPE_CHECKING:`` imports count: a cycle through them is still a tangle (HEAD had one,
    ``service.api.app`` <-> ``service.api.routes``, through the ``Runtime`` type)."""
    assert cycles(import_graph()) == []


def test_service_imports_without_torch() -> None:
    engine = sorted(m for m in service_modules() if m.startswith("service.engine"))
    modules = ["service.gateway.app", "service.gateway.server", "service.cli", "service.cli.commands"]
    modules += engine
    modules += ["service.backends.onnxruntime.backend", "service.evaluation.metrics"]
    modules += [m for m in service_modules() if m.startswith("service.explain") and m not in TORCH_MODULES]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert not [m for m in sys.modules if m.startswith('export')], 'export was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_feature_packages_use_only_the_engines_public_api() -> None:
    """Probes (and later explanations, comparison) are clients of the engine: they reach it through
    ``EngineClient`` (``CaptionEngine`` in process, an engine core in another), ``SearchParams``, the
    request priority, the step observer and the hook registry, never through the scheduler, the runner
    or the beam batch."""
    public = {
        "service.engine.client",
        "service.engine.engine",
        "service.engine.params",
        "service.engine.request",
        "service.engine.observer",
        "service.engine.processors",
        "service.engine.hooks",
    }
    graph = import_graph()
    features = [m for m in graph if m.startswith(("service.probes", "service.explain", "service.compare"))]
    assert features
    reached = {
        (m, t) for m in features for t in graph[m] if t.startswith("service.engine") and t not in public
    }
    assert reached == set()


def test_the_client_imports_only_httpx_and_the_standard_library() -> None:
    """``client/compcap_client`` (its own distribution, Python >= 3.9, depending on httpx alone) imports no
    module of the project but its own, and nothing installed but httpx — NumPy and PIL only by name, under
    ``TYPE_CHECKING`` or where the caller's image already loaded them — at any level."""
    client = ROOT / "client"
    allowed = {"compcap_client", "httpx", "typing_extensions", "numpy", "PIL"}
    found = set()
    for path in sorted((client / "compcap_client").rglob("*.py")):
        parts = path.relative_to(client).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found |= {name.split(".")[0] for name in imported_names(module, path)}
    outside = {name for name in found - allowed if name not in sys.stdlib_module_names}
    assert not outside, outside
    assert "service" not in found and "httpx" in found
    # typing_extensions is no dependency: type checkers alone read it (Self, ParamSpec's kin on 3.9)
    for path in sorted((client / "compcap_client").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for child in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "typing_extensions":
                assert id(node) in guarded, f"{path.name}:{node.lineno}: typing_extensions at run time"
