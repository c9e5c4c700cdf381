"""``compcap-lab``: the research lab's command line (``compcap_lab.cli``), ``service.cli``'s machinery over
the ``compcap_lab.commands`` tables. The two programs share no command; each lists only its own, with its
own description; a command of the other given to either exits 2 with one line saying where it went, and
``compcap`` finds the lab's names through the lab's entry-point group, with no import of ``export``."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from compcap_lab.cli import LAB
from compcap_lab.cli import main as lab_main
from service import cli
from service.cli.table import ENTRY_POINT_GROUP, LAB_ENTRY_POINT_GROUP
from tests.cli_help import HEAVY, help_of

ROOT = Path(__file__).resolve().parents[3]
LAB_COMMANDS = {
    "world", "train", "build", "splits", "models", "evaluate", "report", "substitutivity", "productivity",
    "explain-report", "render-reports", "counterfactual", "seeds", "mad", "probe-load", "shadow-load",
    "compositional",
}  # fmt: skip


def test_the_lab_has_its_commands_and_the_two_tables_share_none() -> None:
    product, lab = set(cli.all_commands()), set(cli.all_commands(LAB))
    assert lab == LAB_COMMANDS
    assert product & lab == set()


def test_each_group_and_script_is_installed() -> None:
    """The entry points come from the installed metadata (``pip install -e .`` and ``-e ./lab``, as
    ``make install``)."""
    assert {e.name for e in entry_points(group=ENTRY_POINT_GROUP)} == {"export", "loadtests"}
    assert {e.name for e in entry_points(group=LAB_ENTRY_POINT_GROUP)} == {"pipeline", "studies", "load"}
    scripts = {e.name: e.value for e in entry_points(group="console_scripts") if e.name.startswith("compcap")}
    assert scripts == {"compcap": "service.cli:main", "compcap-lab": "compcap_lab.cli:main"}


def test_lab_help_lists_only_the_labs_commands_and_imports_nothing_heavy() -> None:
    out, listed, imported = help_of("compcap_lab.cli")
    assert out.startswith("usage: compcap-lab ") and "CompCap's research lab: SceneWorld data" in out
    assert listed == {name: command.help for name, command in cli.all_commands(LAB).items()}
    assert [m for m in imported if m.split(".")[0] in HEAVY] == []


def test_product_help_names_no_lab_command() -> None:
    out, listed, imported = help_of("service.cli")
    assert "CompCap: serve, caption and probe image captioners" in out
    assert set(listed) & LAB_COMMANDS == set()
    assert not {"compcap_lab.cli", "compcap_lab.commands.pipeline", "compcap_lab.commands.studies"} & imported


@pytest.mark.parametrize("name", sorted(LAB_COMMANDS))
def test_a_lab_command_given_to_compcap_is_one_line_pointing_at_the_lab(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--repo", "x"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"compcap {name}: moved to the lab: run compcap-lab {name} (python -m compcap_lab.cli {name})\n"
    )


def test_the_pointer_in_a_fresh_process() -> None:
    """``compcap substitutivity`` in a fresh interpreter: exit 2, the one line, and ``export`` loaded only
    through the lab's entry-point group to find the name."""
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "--debug", "substitutivity", "--repo", "model_zoo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "compcap substitutivity: moved to the lab: run compcap-lab substitutivity "
        "(python -m compcap_lab.cli substitutivity)\n"
    )


@pytest.mark.parametrize("name", ["serve", "bench", "probesets"])
def test_a_product_command_given_to_the_lab_points_at_compcap(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        lab_main([name])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"compcap-lab {name}: a product command: run compcap {name} (python -m service.cli {name})\n"
    )


def test_an_unknown_name_is_still_unknown_to_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        lab_main(["wrld"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "compcap-lab: unknown command 'wrld' (did you mean world?); compcap-lab --help lists the commands\n"
    )
    with pytest.raises(SystemExit):
        cli.main(["wrld"])
    assert capsys.readouterr().err.startswith("compcap: unknown command 'wrld';")


def test_the_lab_runs_its_command_with_the_same_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        lab_main(["world", "--images", "5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("compcap-lab world: ") and "--out" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_:
        lab_main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("compcap-lab ")
