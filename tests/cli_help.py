"""``python -m MODULE --help`` in a fresh interpreter, for the tests of the two command lines: its
output, the commands it lists (name → help) and the modules it imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "torch", "onnxruntime", "fastapi", "uvicorn", "pydantic", "matplotlib", "PIL", "spacy")
_HELP = """
import json, runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def help_of(module: str) -> tuple[str, dict[str, str], set[str]]:
    """``python -m module --help``: (its output, name → help of each command listed, modules imported);
    it must exit 0."""
    result = subprocess.run(
        [sys.executable, "-c", _HELP, module],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "250"},  # one line per command
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(result.stderr.splitlines()[-1])
    assert report["code"] == 0, result.stderr
    listed = {m.group(1): m.group(2) for m in re.finditer(r"^ {4}(\S+) +(.+)$", result.stdout, re.M)}
    return result.stdout, listed, set(report["modules"])
