"""How a load test hands over its result: its summary table printed, the result written as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def print_and_save(result: dict[str, Any], table: Table, json_path: str | None) -> int:
    """Print a load test's summary table; write its result as JSON when asked. Exit code 0."""
    Console(width=None if sys.stdout.isatty() else 150).print(table)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


__all__ = ["print_and_save"]
