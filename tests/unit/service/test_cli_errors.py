"""``compcap`` and ``compcap-lab`` fail politely: a wrong invocation of any command exits 2 with one line
on stderr, ``compcap COMMAND: ...`` (``compcap-lab COMMAND: ...``), naming the argument at fault, checked
before any work and without a traceback (in process and in a fresh interpreter); a traceback only with
``--debug``; ``--version``; every flag with help and its default; one vocabulary with the old spellings
still parsed."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from compcap_lab.cli import LAB
from service import cli
from service.cli.table import Command
from service.logs import JsonFormatter, TextFormatter, resolve_format

ROOT = Path(__file__).resolve().parents[3]
MISSING = "/nonexistent/compcap-test"

# (argv, what the one line must name; a lab command runs in compcap-lab); TMP: an existing folder, OUT: a
# folder that may be created, FILE: an existing plain file. Every one of them must be refused before any work.
# fmt: off
WRONG: list[tuple[list[str], str]] = [
    (["world", "--out", "OUT", "--images", "0"], "--images"),
    (["world", "--out", "OUT", "--images", "-5"], "--images"),
    (["world", "--out", "/proc/nope"], "--out"),
    (["world", "--images", "5"], "--out"),
    (["world", "--out", "OUT", "--imagse", "5"], "--images?"),  # did you mean
    (["world", "--out", "OUT", "--seed", "x"], "--seed"),
    (["train", "--data", MISSING, "--out", "OUT"], "--data"),
    (["train", "--data", "TMP", "--out", "OUT", "--preset", "huge"], "--preset"),
    (["build", "--out", "FILE"], "--out"),
    (["models", "--work", "FILE"], "--work"),
    (["splits", "--data", MISSING, "--kind", "full"], "--data"),
    (["splits", "--data", "TMP", "--kind", "systematicity"], "--group is required"),
    (["splits", "--data", "TMP", "--kind", "systematicity", "--group", "7"], "--group"),
    (["probeset", "--data", MISSING, "--kind", "productivity", "--out", "OUT"], "--data"),
    (["probeset", "--data", "TMP", "--kind", "novelty", "--out", "OUT"], "--kind"),
    (["probeset", "--data", "TMP", "--kind", "productivity"], "--out"),
    (["probeset", "--data", "TMP", "--kind", "productivity", "--out", "OUT", "--per-pair", "0"],
     "--per-pair"),
    (["probesets", "--repo", MISSING], "--repo"),
    (["probesets", "--repo", "TMP", "--kind", "novelty"], "--kind"),
    (["import", "hf", MISSING, "--name", "x", "--repo", "TMP"], "snapshot"),
    (["import", "hf", "TMP", "--name", "x", "--repo", "TMP", "--held-out-pairs", MISSING],
     "--held-out-pairs"),
    (["import", "hf", "TMP", "--name", "x", "--repo", "TMP", "--step", "fastest"], "--step"),
    (["calibrate", "--repo", "TMP", "--quantile", "2"], "--quantile"),
    (["evaluate", "--repo", "TMP", "--data", "TMP", "--split", "systematicity"], "--group is required"),
    (["evaluate", "--url", "127.0.0.1:8080", "--data", "TMP", "--split", "full"], "--url"),
    (["evaluate", "--repo", "TMP", "--url", "http://x", "--data", "TMP", "--split", "full"], "--url"),
    (["evaluate", "--repo", "TMP", "--data", "TMP", "--split", "full", "--split-file", MISSING],
     "--split-file"),
    (["evaluate", "--repo", "TMP", "--data", "TMP", "--split", "full", "--limit", "0"], "--limit"),
    (["report", "--repo", MISSING], "--repo"),
    (["report", "--zoo", MISSING], "--zoo"),  # the old spelling is checked the same way
    (["report", "--repo", "TMP", "--groups", "1", "9"], "--groups"),
    (["substitutivity", "--data", MISSING, "--train", "TMP", "--repo", "TMP"], "--data"),
    (["productivity", "--train-data", "TMP", "--eval-data", MISSING, "--repo", "TMP"], "--eval-data"),
    (["explain-report", "--repo", "TMP", "--images", "0"], "--images"),
    (["explain-report", "--repo", "TMP", "--n-steps", "abc"], "--n-steps"),
    (["mad", "--repo", "TMP", "--k", "0"], "--k"),
    (["mad", "--repo", "TMP", "--image-dir", MISSING], "--image-dir"),
    (["bench", "--clients", "abc"], "--clients"),
    (["bench", "--repo", "TMP", "--clients", "1,0"], "--clients"),
    (["bench", "--repo", "TMP", "--seconds", "0"], "--seconds"),
    (["bench", "--repo", "TMP", "--duration", "-1"], "--duration"),
    (["bench", "--repo", MISSING], "--repo"),
    (["bench", "--repo", "TMP", "--json", "/proc/nope/bench.json"], "--json"),
    (["probe-load", "--repo", "TMP", "--background-share", "1.5"], "--background-share"),
    (["shadow-load", "--repo", "TMP", "--rounds", "0"], "--rounds"),
    (["triton", "--repo", MISSING], "--repo"),
    (["triton", "--repo", "TMP", "--http-port", "70000"], "--http-port"),
    (["serve", "--repo", MISSING], "--repo"),
    (["serve", "--port", "99999"], "--port"),
    (["serve", "--port", "http"], "--port"),
    (["probe", "--url", "127.0.0.1:18432", "--kind", "productivity"], "--url"),
    (["probe", "--url", "http://127.0.0.1:1", "--kind", "productivity", "--beam-size", "0"], "--beam-size"),
    (["probe", "--kind", "productivity"], "--url"),
    (["caption", MISSING], "IMAGE"),
    (["caption", "FILE", "--url", "localhost:8080"], "--url"),
    (["caption", "FILE", "--beam-size", "0"], "--beam-size"),
    (["serv"], "serve?"),  # did you mean
    ([], "COMMAND"),
]
# fmt: on


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file.txt").write_text("not a folder\n")
    return {"TMP": str(tmp_path), "OUT": str(tmp_path / "out" / "new"), "FILE": str(tmp_path / "file.txt")}


def _argv(argv: list[str], places: dict[str, str]) -> list[str]:
    return [places.get(word, word) for word in argv]


LAB_NAMES = frozenset(cli.all_commands(LAB))


def _program(argv: list[str]) -> cli.Program:
    """compcap-lab for a lab command, else compcap."""
    return LAB if argv and argv[0] in LAB_NAMES else cli.PRODUCT


def _run(argv: list[str]) -> int:
    try:
        return cli.main(argv, _program(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def test_there_are_at_least_thirty_wrong_invocations() -> None:
    assert len(WRONG) >= 30


@pytest.mark.parametrize(("argv", "named"), WRONG, ids=[" ".join(a) or "(nothing)" for a, _ in WRONG])
def test_a_wrong_invocation_is_one_line_naming_the_argument(
    argv: list[str],
    named: str,
    places: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("COMPCAP_REPO", raising=False)
    monkeypatch.chdir(tmp_path)  # no model_repo here: a default repository is not there either
    assert _run(_argv(argv, places)) == 2
    out, err = capsys.readouterr()
    program = _program(argv)
    command = argv[0] if argv and argv[0] in cli.all_commands(program) else None
    prefix = f"{program.name} {command}: " if command else f"{program.name}: "
    assert err.startswith(prefix) and err.count("\n") == 1, err
    assert named in err and "Traceback" not in err, err
    assert out == ""
    assert not (tmp_path / "out").exists()  # a folder it only tried to create is gone again


SUBPROCESS = [
    ["probe", "--url", "127.0.0.1:18432", "--kind", "productivity"],
    ["world", "--out", "/proc/nope"],
    ["bench", "--clients", "abc"],
    ["serve", "--repo", MISSING],
    ["evaluate", "--repo", "TMP", "--data", "TMP", "--split", "systematicity"],
]


@pytest.mark.parametrize("argv", SUBPROCESS, ids=[" ".join(a) for a in SUBPROCESS])
def test_no_traceback_reaches_stderr_of_the_process(argv: list[str], places: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COMPCAP_REPO"}
    program = _program(argv)
    module = "compcap_lab.cli" if program is LAB else "service.cli"
    result = subprocess.run(
        [sys.executable, "-m", module, *_argv(argv, places)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"{program.name} {argv[0]}: ") and result.stderr.count("\n") == 1, (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"compcap {importlib.metadata.version('compcap')}"
    assert cli.version() == importlib.metadata.version("compcap")


def _commands(run: Callable[[argparse.Namespace], int]) -> dict[str, Command]:
    return {"boom": Command("fails", lambda parser: None, run)}


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--repo", str(tmp_path / "nope")]
    assert cli.main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert cli.main(["--debug", *argv] if where == "before" else [*argv, "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "UsageError" in err
    assert err.splitlines()[-1].startswith("compcap serve: no model repository at")


def test_a_crash_is_one_line_pointing_at_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(args: argparse.Namespace) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cli, "all_commands", lambda *_: _commands(crash))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["boom"])
    assert exit_.value.code == 1 and isinstance(exit_.value.__cause__, RuntimeError)
    err = capsys.readouterr().err
    assert err == "compcap boom: RuntimeError: boom; second line (run with --debug for the traceback)\n"
    with pytest.raises(SystemExit):
        cli.main(["--debug", "boom"])
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("compcap boom: RuntimeError: boom; second line\n")


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (KeyboardInterrupt(), 130, ""),
        (FileNotFoundError(2, "No such file or directory", "/x/captions.json"), 2, "compcap boom: "),
        (ValueError("--thing: bad"), 2, "compcap boom: --thing: bad\n"),
        (SystemExit("compcap boom: said it itself"), 2, "compcap boom: said it itself\n"),
    ],
)
def test_ordinary_failures_map_to_their_exit(
    raised: BaseException,
    code: int,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise raised

    monkeypatch.setattr(cli, "all_commands", lambda *_: _commands(fail))
    assert _run(["boom"]) == code
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == (1 if line else 0), err
    if isinstance(raised, FileNotFoundError):
        assert err == "compcap boom: /x/captions.json: no such file or directory\n"


def test_every_flag_has_help_and_shows_its_default() -> None:
    for program in (cli.PRODUCT, LAB):
        commands = cli.all_commands(program)
        for name in commands:
            parser = cli.build_parser([name], commands, program).chosen
            assert parser is not None
            undocumented = [a.option_strings or a.dest for a in parser._actions if a.help is None]
            assert undocumented == [], f"{program.name} {name}: {undocumented}"
            parser.format_help()  # every help string formats
    world = cli.build_parser(["world"], program=LAB).chosen
    assert world is not None
    text = " ".join(world.format_help().split())
    assert "images to generate (default: 1000)" in text and "(default: None)" not in text


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser(argv, program=_program(argv)).parse_args(argv)


@pytest.mark.parametrize(
    ("new", "old"),
    [
        (["bench", "--seconds", "3"], ["bench", "--duration", "3"]),
        (["probe-load", "--seconds", "3"], ["probe-load", "--duration", "3"]),
        (["bench", "--clients", "1", "8"], ["bench", "--clients", "1,8"]),
        (["bench", "--rerank", "none"], ["bench", "--rerank", "false"]),
        (["report", "--repo", "TMP"], ["report", "--zoo", "TMP"]),
        (["report", "--repo", "TMP", "--groups", "1", "3"], ["report", "--repo", "TMP", "--groups", "1,3"]),
        (["explain-report", "--repo", "TMP", "--model", "a", "b"],
         ["explain-report", "--zoo", "TMP", "--captioners", "a,b"]),
        (["substitutivity", "--data", "TMP", "--train", "TMP", "--model", "x"],
         ["substitutivity", "--data", "TMP", "--train", "TMP", "--captioner", "x"]),
        (["probesets", "--repo", "TMP", "--kind", "productivity", "systematicity"],
         ["probesets", "--repo", "TMP", "--kind", "productivity", "--kind", "systematicity"]),
        (["probe", "--url", "http://h:1", "--kind", "k", "--pairs", "black cat", "red bus"],
         ["probe", "--url", "http://h:1", "--kind", "k", "--pairs", "black cat,red bus"]),
        (["calibrate", "--repo", "TMP", "--model", "a", "b"],
         ["calibrate", "--repo", "TMP", "--model", "a", "--model", "b"]),
    ],
)  # fmt: skip
def test_old_spellings_still_parse_the_same(
    new: list[str],
    old: list[str],
    places: dict[str, str],
    tiny_like: None,
) -> None:
    assert vars(_parse(_argv(new, places))) == vars(_parse(_argv(old, places)))


@pytest.fixture
def tiny_like(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults that name folders (bench's model_repo, the studies' model_zoo) exist here."""
    for name in ("model_repo", "model_zoo"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)


def test_one_vocabulary_in_help() -> None:
    """The old spellings parse but are not offered; no re-ranking is spelled 'none' everywhere."""
    texts = {}
    for program in (cli.PRODUCT, LAB):
        commands = cli.all_commands(program)
        for name in commands:
            parser = cli.build_parser([name], commands, program).chosen
            assert parser is not None
            texts[name] = " ".join(parser.format_help().split())
    for name, text in texts.items():
        for old in ("--zoo", "--duration", "--captioners", "--captioner "):
            assert old not in text, f"{name} --help offers {old}"
    assert (
        "'none' for plain beam search" in texts["bench"] and "'none' for plain beam search" in texts["probe"]
    )
    assert "--clients N [N ...]" in texts["bench"]


def test_rerank_values() -> None:
    from service.cli.args import rerank

    assert [rerank(v) for v in ("none", "false", "OFF", "no")] == [False] * 4
    assert [rerank(v) for v in ("default", "", "true", "butr")] == [None, None, True, "butr"]


def test_logs_are_text_on_a_terminal_and_json_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert resolve_format("auto", Terminal()) == "text"
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("json", Terminal()) == "json" and resolve_format("text", io.StringIO()) == "text"
    record = logging.LogRecord("compcap.access", logging.INFO, "f", 1, "request", None, None)
    record.status = 200
    assert TextFormatter().format(record).endswith(" INFO    compcap.access: request status=200")
    assert '"status":200' in JsonFormatter().format(record)
    from service.logs import LogSettings

    assert LogSettings.model_fields["log_format"].default == "auto"
