"""``compcap-lab render-reports``: every study's committed Markdown is its committed JSON
re-rendered — so the reports' intervals and qualifications come from the code, not from hand edits —
and the qualifications are there: the explanations' verdicts against the pointing
game, the MAD verdicts against the tie-break, and the units each report's figures could be bootstrapped
over."""

from __future__ import annotations

import shutil
from pathlib import Path

from compcap_lab.cli import main
from compcap_lab.studies.rerender import rerender

REPORTS = Path(__file__).resolve().parents[3] / "reports"
STUDIES = [
    "explanations",
    "substitutivity",
    "substitutivity_default/substitutivity",
    "productivity_length",
    "productivity_density",
    "mad",
    "mad_zoo/mad",
    "seeds",
    "counterfactual",
    "counterfactual_zoo/counterfactual",
    "search_hook",
]


def test_every_committed_study_report_is_its_json_rerendered(tmp_path: Path) -> None:
    for name in STUDIES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPORTS / f"{name}.json", tmp_path / f"{name}.json")
    written = rerender(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(f"{n}.md" for n in STUDIES)
    for name in STUDIES:
        mine = (tmp_path / f"{name}.md").read_text(encoding="utf-8")
        assert mine == (REPORTS / f"{name}.md").read_text(encoding="utf-8"), name


def test_the_command_rerenders_a_folder(tmp_path: Path, capsys: object) -> None:
    shutil.copy(REPORTS / "explanations.json", tmp_path / "explanations.json")
    assert main(["render-reports", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "explanations.md").read_text(encoding="utf-8") == (
        REPORTS / "explanations.md"
    ).read_text(encoding="utf-8")


def test_the_explanations_verdicts_say_what_groundingscore_counts() -> None:
    text = (REPORTS / "explanations.md").read_text(encoding="utf-8")
    assert "Integrated gradients has the best pointing game of the four methods for 5 of 5" in text
    assert "background nouns included" in text and "the verdicts above that rest on GroundingScore" in text
    assert "92.9 [" in text  # the pointing game with its interval over nouns
    assert "not each caption's score, so they have no interval" in text


def test_the_mad_verdicts_carry_the_tie_break() -> None:
    text = (REPORTS / "mad.md").read_text(encoding="utf-8")
    verdicts = [
        line for line in text.splitlines() if "— **holds**" in line or "reorders models holds" in line
    ]
    assert len(verdicts) == 3
    assert all("Qualified: the tie-break decides D_ij in 6 of 6 pairs" in line for line in verdicts)
    assert "No figure here has an interval" in text


def test_the_substitutivity_reports_say_what_their_figures_rest_on() -> None:
    zoo = (REPORTS / "substitutivity.md").read_text(encoding="utf-8")
    assert "How often S follows O up to the substituted word is not known for this run" in zoo
    assert "the Ot vs St row above was computed with the earlier cut" in zoo
    default = (REPORTS / "substitutivity_default/substitutivity.md").read_text(encoding="utf-8")
    assert "S follows O word for word up to the substituted word" in default
    assert "| Ot vs St, S follows O up to the word |" in default


def test_the_productivity_reports_say_why_they_have_no_interval() -> None:
    for name in ("productivity_length", "productivity_density"):
        assert "No figure here has an interval" in (REPORTS / f"{name}.md").read_text(encoding="utf-8")
