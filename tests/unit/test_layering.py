"""The service must import and build its app without torch (DESIGN.md: torch stays in export/), and
service code must not import export (the one-way contract is model_repo/manifest.json)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"


def test_service_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "import service.api.app, service.api.server, service.cli, service.engine.captioning\n"
        "import service.backends.onnxruntime, service.evaluation.metrics\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert not [m for m in sys.modules if m.startswith('export')], 'export was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_service_sources_never_import_export_or_torch() -> None:
    offenders = []
    for path in SERVICE.rglob("*.py"):
        if path.name == "cli.py":  # offline subcommands import export lazily, inside functions
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("export", "torch")]
    assert offenders == []
