"""``compcap``: the product's entry point over the packages' command tables, a user's or an operator's
commands only (the lab's are ``compcap-lab``'s: tests/unit/service/test_lab_cli.py); listing them imports
nothing heavy; ``compcap serve`` takes its settings from ``COMPCAP_*`` and a flag overrides one only when
given."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from service import cli
from service.cli.commands import serve_settings
from service.cli.table import Command
from tests.cli_help import HEAVY, help_of

ROOT = Path(__file__).resolve().parents[3]
PRODUCT_COMMANDS = {
    "serve", "triton", "probe", "caption", "calibrate", "import", "quantize", "upgrade", "probeset",
    "probesets", "bench",
}  # fmt: skip
COMMAND_TABLES = {"export", "export.commands", "loadtests", "loadtests.commands"}  # the product's, no lab's


def test_the_product_has_its_commands_and_no_more_than_twelve() -> None:
    assert set(cli.all_commands()) == PRODUCT_COMMANDS and len(PRODUCT_COMMANDS) <= 12


def test_help_lists_every_command_and_imports_nothing_heavy() -> None:
    """``compcap --help`` (``python -m service.cli --help`` in a fresh interpreter) lists each of its
    commands with its help, importing its command tables (not the lab's) and nothing heavy."""
    _, listed, imported = help_of("service.cli")
    assert listed == {name: command.help for name, command in cli.all_commands().items()}
    assert [m for m in imported if m.split(".")[0] in HEAVY] == []
    assert {m for m in imported if m.split(".")[0] in ("export", "loadtests")} == COMMAND_TABLES


def test_only_the_chosen_command_gets_its_arguments() -> None:
    added: list[str] = []

    def command(name: str) -> Command:
        def add(parser: argparse.ArgumentParser) -> None:
            added.append(name)
            parser.add_argument("--x", type=int, default=1)

        return Command(f"help of {name}", add, lambda args: args.x)

    commands = {"one": command("one"), "two": command("two")}
    args = cli.build_parser(["two", "--x", "7"], commands).parse_args(["two", "--x", "7"])
    assert added == ["two"] and args.func(args) == 7


def test_two_tables_defining_one_command_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    same = Command("h", lambda parser: None, lambda args: 0)
    monkeypatch.setattr(cli, "command_tables", lambda *_: [("a", {"x": same}), ("b", {"x": same})])
    with pytest.raises(RuntimeError, match="'x' is defined by both a and b"):
        cli.all_commands()


def _serve_args(*flags: str) -> argparse.Namespace:
    words = ["serve", *flags]
    return cli.build_parser(words).parse_args(words)


def test_serve_flag_given_overrides_the_environment(
    tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPCAP_HOST", "0.0.0.0")
    monkeypatch.setenv("COMPCAP_PORT", "9999")
    monkeypatch.setenv("COMPCAP_REPO", str(tmp_path / "no_repo_here"))
    settings = serve_settings(_serve_args("--host", "127.0.0.2", "--port", "1234", "--repo", str(tiny_repo)))
    assert (settings.host, settings.port, settings.repo) == ("127.0.0.2", 1234, tiny_repo)


def test_serve_flag_absent_leaves_the_environment(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPCAP_HOST", "0.0.0.0")
    monkeypatch.setenv("COMPCAP_PORT", "9999")
    monkeypatch.setenv("COMPCAP_REPO", str(tiny_repo))
    settings = serve_settings(_serve_args())
    assert (settings.host, settings.port, settings.repo) == ("0.0.0.0", 9999, tiny_repo)
    settings = serve_settings(_serve_args("--port", "1234"))  # one flag given: only that one overrides
    assert (settings.host, settings.port, settings.repo) == ("0.0.0.0", 1234, tiny_repo)


def test_serve_without_flags_or_environment_uses_the_defaults(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("COMPCAP_HOST", "COMPCAP_PORT"):
        monkeypatch.delenv(name, raising=False)
    settings = serve_settings(_serve_args("--repo", str(tiny_repo)))
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("PROBE_SCHEDULE", "every=never", "probe_schedule: Value error, every: 'never' is not a duration"),
        (
            "SHADOW_MODEL",
            "nope",
            ": Value error, shadow_model: unknown captioner 'nope'; captioners: butr, butd",
        ),
        ("MAX_BEAM_SIZE", "101", "max_beam_size: Input should be less than or equal to 100"),
    ],
)
def test_serve_exits_naming_a_bad_setting(
    tiny_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    message: str,
) -> None:
    """A setting a feature parses at install (the schedule, the shadow) stops ``compcap serve`` with
    the same one line (exit 2) as one ``Settings`` refuses, before anything is served."""
    from service.gateway import server

    monkeypatch.setenv("COMPCAP_REPO", str(tiny_repo))
    monkeypatch.setenv("COMPCAP_PORT", "0")  # any free port: whatever this machine already serves
    monkeypatch.setenv(f"COMPCAP_{variable}", value)
    monkeypatch.setattr(server, "configure_logging", lambda *_, **__: None)
    monkeypatch.setattr(server.uvicorn, "run", lambda *_, **__: pytest.fail("served"))
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"compcap serve: invalid settings: {message}") and err.count("\n") == 1


def test_command_tables_offer_the_split_kinds_of_the_pipeline() -> None:
    import argparse

    from compcap_lab.commands.pipeline import COMMANDS as EXPORT
    from compcap_lab.commands.studies import COMMANDS as STUDIES
    from export.data.splits import KINDS

    offered = []
    for command, flag in ((EXPORT["splits"], "--kind"), (STUDIES["evaluate"], "--split")):
        parser = argparse.ArgumentParser()
        command.add_arguments(parser)
        (action,) = [a for a in parser._actions if flag in a.option_strings]
        offered.append(tuple(action.choices or ()))
    assert offered == [tuple(KINDS), tuple(KINDS)]
