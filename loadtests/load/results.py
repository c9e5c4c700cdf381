"""How a load test hands over its result: its summary table printed, the result written as JSON; and
the run-then-save shape every such command has, on ``compcap`` or as a script of its own."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table


def print_and_save(result: dict[str, Any], summary: Table | Iterable[str], json_path: str | None) -> int:
    """Print a load test's summary (a table, or lines); write its result as JSON when asked. Exit code 0."""
    if isinstance(summary, Table):
        Console(width=None if sys.stdout.isatty() else 150).print(summary)
    else:
        for line in summary:
            print(line)
    return save(result, json_path)


def save(result: dict[str, Any], json_path: str | None) -> int:
    """Write ``result`` as JSON at ``json_path`` (its folder made), when there is one. Exit code 0."""
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


class ScriptMain(Protocol):
    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


def run_and_save(
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace], dict[str, Any]],
    summary: Callable[[dict[str, Any]], Table | Iterable[str]],
    json_path: str | None = None,
) -> int:
    """Run the load test, print its ``summary`` and save its result where ``--json`` (or ``json_path``)
    says."""
    result = run(args)
    return print_and_save(result, summary(result), json_path or args.json)


def script(
    description: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    command: Callable[[argparse.Namespace], int],
    prog: str | None = None,
) -> ScriptMain:
    """A load test's ``main`` as a script of its own: its arguments parsed as ``compcap`` would, then
    its command."""

    def main(argv: Sequence[str] | None = None) -> int:
        parser = argparse.ArgumentParser(prog=prog, description=description)
        add_arguments(parser)
        return command(parser.parse_args(argv))

    return main


__all__ = ["ScriptMain", "print_and_save", "run_and_save", "save", "script"]
