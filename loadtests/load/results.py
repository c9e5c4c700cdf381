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


def print_and_save(result: dict[str, Any], table: Table, json_path: str | None) -> int:
    """Print a load test's summary table; write its result as JSON when asked. Exit code 0."""
    Console(width=None if sys.stdout.isatty() else 150).print(table)
    return save(result, json_path)


def print_lines_and_save(result: dict[str, Any], lines: Iterable[str], json_path: str | None) -> int:
    """Print a measurement's summary lines; write its result as JSON when asked. Exit code 0."""
    for line in lines:
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
    table: Callable[[dict[str, Any]], Table],
) -> int:
    """Run the load test, print its ``table`` and save its result where ``--json`` says."""
    result = run(args)
    return print_and_save(result, table(result), args.json)


def script(
    description: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    command: Callable[[argparse.Namespace], int],
) -> ScriptMain:
    """A load test's ``main`` as a script of its own: its arguments parsed as ``compcap`` would, then
    its command."""

    def main(argv: Sequence[str] | None = None) -> int:
        parser = argparse.ArgumentParser(description=description)
        add_arguments(parser)
        return command(parser.parse_args(argv))

    return main


__all__ = ["ScriptMain", "print_and_save", "print_lines_and_save", "run_and_save", "save", "script"]
