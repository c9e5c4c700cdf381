"""``compcap-lab report --reuse``: the report re-rendered from its committed JSON has the committed report's
headings and tables (the parts that do not depend on the zoo's build report), and its plots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compcap_lab.studies.report import write_report

REPORTS = Path(__file__).resolve().parents[3] / "reports"


def _headings_and_tables(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("#", "|"))]


@pytest.mark.skipif(not (REPORTS / "reproduction.json").is_file(), reason="no committed report")
def test_report_rerendered_from_its_json_matches_the_committed_one(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    shutil.copy(REPORTS / "reproduction.json", out / "reproduction.json")
    write_report(tmp_path / "model_zoo", tmp_path / "eval_world", out, reuse=True)
    rendered = (out / "reproduction.md").read_text(encoding="utf-8")
    committed = (REPORTS / "reproduction.md").read_text(encoding="utf-8")
    assert _headings_and_tables(rendered) == _headings_and_tables(committed)
    assert len(_headings_and_tables(rendered)) > 50
    stored = json.loads((REPORTS / "reproduction.json").read_text(encoding="utf-8"))
    assert json.loads((out / "reproduction.json").read_text(encoding="utf-8")) == stored
    assert sorted(p.name for p in out.glob("*.png")) == [
        "recall_at_5.png",
        "recall_at_k.png",
        "rerank_weight.png",
    ]


@pytest.mark.skipif(not (REPORTS / "reproduction.json").is_file(), reason="no committed report")
def test_the_report_command_rerenders_without_the_zoo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compcap-lab report --reuse`` needs only the report's JSON (the zoo is not there); without
    ``--reuse`` a missing zoo is refused by name."""
    from compcap_lab.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "reports"
    out.mkdir()
    shutil.copy(REPORTS / "reproduction.json", out / "reproduction.json")
    assert main(["report", "--reuse", "--out", str(out)]) == 0
    committed = (REPORTS / "reproduction.md").read_text(encoding="utf-8")
    assert (out / "reproduction.md").read_text(encoding="utf-8") == committed
    assert main(["report", "--out", str(out)]) == 2
    assert "--repo model_zoo: no such folder" in capsys.readouterr().err
