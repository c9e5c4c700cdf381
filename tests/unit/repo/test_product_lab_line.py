"""The line between the product and the lab (docs/architecture.md): what a person serving and probing
captioners runs is the product (``service``, ``export``, ``sceneworld``, ``loadtests``, the client: the
``compcap`` distribution at the repository's root); what reproduces or extends the papers is the lab
(``compcap_lab`` under ``lab/``, the ``compcap-lab`` distribution). The lab depends on the product, never
the reverse; neither distribution's modules import each other in a loop; the product's wheel holds no lab
module."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.unit.repo.test_layering import cycles, import_statements

ROOT = Path(__file__).resolve().parents[3]
PRODUCT_ROOTS = {name: ROOT / name for name in ("service", "export", "sceneworld", "loadtests")} | {
    "compcap_client": ROOT / "client" / "compcap_client"
}
LAB_ROOTS = {"compcap_lab": ROOT / "lab" / "compcap_lab"}


def modules_of(roots: dict[str, Path]) -> dict[str, Path]:
    """Every module under ``roots`` (package name -> its folder) by dotted name."""
    out = {}
    for package, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def graph_of(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the same set it imports (``from a import b`` is ``a.b`` when that is one)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for base, names in import_statements(module, path):
            for name in names or [None]:
                target = f"{base}.{name}" if name and f"{base}.{name}" in modules else base
                if target in modules and target != module:
                    targets.add(target)
        graph[module] = targets
    return graph


def test_the_product_never_imports_the_lab() -> None:
    offenders = sorted(
        f"{module}: {base}"
        for module, path in modules_of(PRODUCT_ROOTS).items()
        for base, _ in import_statements(module, path)
        if base == "compcap_lab" or base.startswith("compcap_lab.")
    )
    assert offenders == []


def test_the_lab_imports_the_product_so_the_check_above_reads_real_imports() -> None:
    imported = {
        base.partition(".")[0]
        for m, p in modules_of(LAB_ROOTS).items()
        for base, _ in import_statements(m, p)
    }
    assert {"service", "export"} <= imported


def test_no_import_cycle_in_either_distribution() -> None:
    assert cycles(graph_of(modules_of(PRODUCT_ROOTS))) == []
    assert cycles(graph_of(modules_of(LAB_ROOTS))) == []


def test_the_product_wheel_packages_no_lab_module() -> None:
    product = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = product["tool"]["setuptools"]["packages"]["find"]
    assert "lab" not in found["where"] and not any(i.startswith("compcap_lab") for i in found["include"])
    assert not (ROOT / "compcap_lab").exists(), (
        "the lab's package lives under lab/, outside the product's roots"
    )
    assert "compcap-lab" not in product["project"]["scripts"]
    lab = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text(encoding="utf-8"))
    assert lab["project"]["scripts"]["compcap-lab"] == "compcap_lab.cli:main"
    assert lab["project"]["entry-points"]["compcap_lab.commands"]
