"""``compcap``: one entry point over the command tables of the installed packages. The service's own
commands (serve, triton) come from ``service.commands``; every other package registers its table in the
``compcap.commands`` entry-point group (``pyproject.toml``), so this module names no package above
``service``. Listing the commands imports only those light tables; a command's arguments and its heavy
modules are imported only when it is chosen, so ``compcap serve`` runs without torch."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points

from service.cli_table import ENTRY_POINT_GROUP, Command, CommandTable
from service.commands import COMMANDS as SERVICE_COMMANDS


def command_tables() -> list[tuple[str, CommandTable]]:
    """(owner, table): the service's own, then each table of the entry-point group, by entry-point name.
    A table that cannot be imported (its package is not installed) is skipped with a warning."""
    tables: list[tuple[str, CommandTable]] = [("service", SERVICE_COMMANDS)]
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            tables.append((entry.name, entry.load()))
        except ImportError as exc:
            print(f"compcap: skipping the {entry.name} commands ({entry.value}): {exc}", file=sys.stderr)
    return tables


def all_commands() -> dict[str, Command]:
    """Every command by name; two tables defining one name is an error."""
    commands: dict[str, Command] = {}
    owners: dict[str, str] = {}
    for owner, table in command_tables():
        for name, command in table.items():
            if name in commands:
                raise RuntimeError(f"compcap: command {name!r} is defined by both {owners[name]} and {owner}")
            commands[name], owners[name] = command, owner
    return commands


def build_parser(
    argv: Sequence[str], commands: Mapping[str, Command] | None = None
) -> argparse.ArgumentParser:
    """The parser for ``argv``: every command listed with its help, and the arguments of the command
    ``argv`` chooses (its first word) added, so that no other command's modules are imported."""
    commands = all_commands() if commands is None else commands
    chosen = next((word for word in argv if not word.startswith("-")), None)
    parser = argparse.ArgumentParser(
        prog="compcap",
        description="CompCap: build, serve and study image captioners (`compcap COMMAND --help` for a "
        "command's options).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in commands.items():
        subparser = sub.add_parser(name, help=command.help, description=command.help)
        if name == chosen:
            command.add_arguments(subparser)
        subparser.set_defaults(func=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(words).parse_args(words)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
