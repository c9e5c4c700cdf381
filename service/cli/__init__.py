"""``compcap`` (the product: serve, caption, probe, and prepare model repositories) and, through the same
machinery, ``compcap-lab`` (the research lab, whose ``main`` lives above ``service``), each one entry
point over command tables. The service's own commands (serve, triton, probe, caption) come from
``service.cli.commands``; every other package registers its tables in a program's entry-point group
(``compcap.commands``, ``compcap_lab.commands``; ``pyproject.toml``), so this module names no package
above ``service``. Listing the commands imports only those light tables; a command's arguments and its
heavy modules are imported only when it is chosen, so ``compcap serve`` runs without torch. A command of
the other program is not listed; given here, it is one line saying where it went, and exit 2.

Failures are reported here, once for every command (``service.cli.errors``): a mistake of the user's is
one line ``compcap COMMAND: what is wrong`` and exit 2, anything else one line and exit 1, Ctrl-C exit
130; a traceback only with ``--debug``.

The package is the command line's room: this module (the programs, ``main``; ``python -m service.cli``
runs it through ``__main__``), ``table`` (what a command table is, and the entry-point groups),
``errors`` (how a failure is reported), ``args`` (argument types) and ``blocks`` (argument groups the
tables share), ``commands`` (the service's own table) and ``caption_files`` (``compcap caption``)."""

from __future__ import annotations

import argparse
import difflib
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any, NoReturn

from service.cli.commands import COMMANDS as SERVICE_COMMANDS
from service.cli.errors import INTERRUPTED, USAGE, describe, one_line
from service.cli.table import ENTRY_POINT_GROUP, LAB_ENTRY_POINT_GROUP, Command, CommandTable


@dataclass(frozen=True)
class Neighbour:
    """Another program, for the line that points one of its commands given here at it: its name, the
    entry-point group of its tables (read only when such a name is given), its built-in table, and what
    the line calls it."""

    name: str
    group: str
    said: str
    builtin: CommandTable = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    """One command line: its name as typed, the description its ``--help`` opens with, the entry-point
    group its packages register their tables in, the service's own table (the product's alone), and the
    programs whose commands it points at."""

    name: str
    description: str
    group: str
    builtin: CommandTable = field(default_factory=dict)
    elsewhere: tuple[Neighbour, ...] = ()


PRODUCT = Program(
    name="compcap",
    description="CompCap: serve, caption and probe image captioners, and prepare their model repositories "
    "(`compcap COMMAND --help` for a command's options; SceneWorld, training, the model zoo and the "
    "studies are compcap-lab's).",
    group=ENTRY_POINT_GROUP,
    builtin=SERVICE_COMMANDS,
    elsewhere=(Neighbour("compcap-lab", LAB_ENTRY_POINT_GROUP, "moved to the lab"),),
)

DEBUG_HELP = "on a failure, print the traceback too"


def group_tables(group: str, warn: str | None = None) -> list[tuple[str, CommandTable]]:
    """(entry-point name, table) of each table of an entry-point group, by name. A table that cannot be
    imported (its package is not installed) is skipped, with a warning from program ``warn`` if given."""
    tables: list[tuple[str, CommandTable]] = []
    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            tables.append((entry.name, entry.load()))
        except ImportError as exc:
            if warn:
                print(f"{warn}: skipping the {entry.name} commands ({entry.value}): {exc}", file=sys.stderr)
    return tables


def command_tables(program: Program = PRODUCT) -> list[tuple[str, CommandTable]]:
    """(owner, table): the service's own (the product's), then each table of the program's group."""
    builtin = [("service", program.builtin)] if program.builtin else []
    return [*builtin, *group_tables(program.group, warn=program.name)]


def all_commands(program: Program = PRODUCT) -> dict[str, Command]:
    """Every command of a program by name; two tables defining one name is an error."""
    commands: dict[str, Command] = {}
    owners: dict[str, str] = {}
    for owner, table in command_tables(program):
        for name, command in table.items():
            if name in commands:
                raise RuntimeError(
                    f"{program.name}: command {name!r} is defined by both {owners[name]} and {owner}"
                )
            commands[name], owners[name] = command, owner
    return commands


def neighbour_of(name: str, program: Program = PRODUCT) -> Neighbour | None:
    """The other program that has command ``name``, found through its entry-point group, else None."""
    for neighbour in program.elsewhere:
        tables = [neighbour.builtin, *(table for _, table in group_tables(neighbour.group))]
        if any(name in table for table in tables):
            return neighbour
    return None


def script_module(script: str) -> str | None:
    """The module an installed console script runs (``compcap`` → ``service.cli``), else None."""
    return next((entry.module for entry in entry_points(group="console_scripts", name=script)), None)


def version() -> str:
    """The installed distribution's version, else the checkout's ``pyproject.toml``'s."""
    try:
        return installed_version("compcap")
    except PackageNotFoundError:
        import tomllib

        try:
            text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
            return str(tomllib.loads(text)["project"]["version"])
        except (OSError, KeyError, ValueError):
            return "unknown"


class HelpFormatter(argparse.HelpFormatter):
    """Each flag's help ends with its default ``(default: X)``, unless the help already speaks of its
    default or there is none to show (``None``, ``False``, an empty list)."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        subactions = getattr(action, "_get_subactions", None)  # the commands, one level more indented
        if action.help is not argparse.SUPPRESS and subactions is not None:
            for subaction in subactions():
                width = len(self._format_action_invocation(subaction)) + self._current_indent
                self._action_max_length = max(self._action_max_length, width + self._indent_increment)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default is None
            or default is False
            or default is argparse.SUPPRESS
            or "default" in text.lower()
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return action.help
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
        if not shown:
            return action.help
        return f"{text} (default: {shown.replace('%', '%%')})".lstrip()


class Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors: ``compcap COMMAND: argument --x: what is wrong`` on
    stderr and exit 2, without the usage block."""

    chosen: Parser | None = None  # the subparser of the command chosen (``build_parser``)

    def error(self, message: str) -> NoReturn:
        hint = f" ({self.prog} --help lists the commands)" if " " not in self.prog else ""
        self.exit(USAGE, f"{self.prog}: {one_line(message)}{hint}\n")


def build_parser(
    argv: Sequence[str], commands: Mapping[str, Command] | None = None, program: Program = PRODUCT
) -> Parser:
    """The program's parser for ``argv``: every command listed with its help, and the arguments of the
    command ``argv`` chooses (its first word) added, so that no other command's modules are imported."""
    commands = all_commands(program) if commands is None else commands
    chosen = _chosen(argv)
    parser = Parser(prog=program.name, description=program.description, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"{program.name} {version()}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in commands.items():
        subparser = sub.add_parser(
            name, help=command.help, description=command.help, formatter_class=HelpFormatter
        )
        if name == chosen:
            command.add_arguments(subparser)
            subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
            parser.chosen = subparser
        subparser.set_defaults(func=command.run)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    return next((word for word in argv if not word.startswith("-")), None)


def _words_before_separator(argv: Sequence[str]) -> list[str]:
    words = list(argv)
    return words[: words.index("--")] if "--" in words else words


def _unknown_command(name: str, commands: Mapping[str, Command], program: Program) -> NoReturn:
    neighbour = neighbour_of(name, program)
    if neighbour is not None:
        module = script_module(neighbour.name)
        runs = f" (python -m {module} {name})" if module else ""
        print(f"{program.name} {name}: {neighbour.said}: run {neighbour.name} {name}{runs}", file=sys.stderr)
        raise SystemExit(USAGE)
    close = difflib.get_close_matches(name, list(commands), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    print(
        f"{program.name}: unknown command {name!r}{hint}; {program.name} --help lists the commands",
        file=sys.stderr,
    )
    raise SystemExit(USAGE)


def _unrecognized(parser: Parser, command: str, extras: Sequence[str]) -> NoReturn:
    options = [o for a in (parser.chosen._actions if parser.chosen else []) for o in a.option_strings]
    flags = [word.split("=")[0] for word in extras if word.startswith("--")]
    close = difflib.get_close_matches(flags[0], options, n=1) if flags else []
    hint = f" (did you mean {close[0]}?)" if close else ""
    print(f"{parser.prog} {command}: unrecognized arguments: {' '.join(extras)}{hint}", file=sys.stderr)
    raise SystemExit(USAGE)


def main(argv: Sequence[str] | None = None, program: Program = PRODUCT) -> int:
    """Run ``compcap`` (or another program) on ``argv`` (default: ``sys.argv[1:]``). Returns the
    command's exit code (2 for a mistake found while it ran); raises ``SystemExit`` for a mistake on the
    command line itself (2, as argparse does), an interrupt (130) or a crash (1, chained to the
    exception)."""
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in _words_before_separator(words)
    name = _chosen(words)
    prog = f"{program.name} {name}" if name else program.name
    return guarded(lambda: _parse_and_run(words, name, program), prog, debug)


def _parse_and_run(words: list[str], name: str | None, program: Program) -> int:
    commands = all_commands(program)
    if name is not None and name not in commands:
        _unknown_command(name, commands, program)
    parser = build_parser(words, commands, program)
    args, extras = parser.parse_known_args(words)
    if extras:
        _unrecognized(parser, args.command, extras)
    result: Any = args.func(args)
    return int(result)


def guarded(work: Callable[[], int], prog: str, debug: bool = False) -> int:
    """``work()`` with the one report of its failure."""
    try:
        return work()
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        raise SystemExit(INTERRUPTED) from None
    except SystemExit as exc:
        if not isinstance(exc.code, str):  # a code: argparse or the command has said what it had to
            raise
        message = exc.code.removeprefix(f"{prog}: ")
        print(f"{prog}: {one_line(message)}", file=sys.stderr)
        return USAGE
    except Exception as exc:
        code, message = describe(exc, debug)
        if debug:
            traceback.print_exception(exc)
        print(f"{prog}: {message}", file=sys.stderr)
        if code == USAGE:
            return code
        raise SystemExit(code) from exc
