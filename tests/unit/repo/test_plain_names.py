"""What users read names no issue number and no paper file code: the API, OpenAPI, CLI help and metrics
help (written in ``service/``, ``client/``, ``export/``, ``loadtests/``, ``scripts/``), the web page,
the docs, the reports, the README, the Makefile and the deployment files. Papers are cited by first
author and year (``docs/papers.md``); an issue is named by what it built.

Outside links stay allowed (``github.com/microsoft/onnxruntime/issues/123``), and so do random seeds
("training seeds 0 1 2")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PRODUCT_TEXT = (
    "service", "client", "export", "sceneworld", "loadtests", "lab", "scripts", "docs", "reports", "k8s",
    "README.md", "Makefile", "Dockerfile", "mkdocs.yml", "pyproject.toml",
)  # fmt: skip
TEXT_SUFFIXES = {".py", ".md", ".html", ".js", ".css", ".txt", ".yml", ".yaml", ".toml", ".json", ".sh", ""}
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)  # "issue 41", "Issues 38/39", "issue #7"
PAPER_CODE = re.compile(r"\bseeds?[\s_-]*0\d\d\b", re.IGNORECASE)  # "seed 001", "seeds 000 / 001"


def product_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *PRODUCT_TEXT], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and Path(name).suffix in TEXT_SUFFIXES]


def offending_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line of ``text`` naming an issue number or a paper file code."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if ISSUE.search(line) or PAPER_CODE.search(line)
    ]


@pytest.mark.parametrize(
    ("line", "offends"),
    [
        ("the counterfactual probe (issue 41)", True),
        ("Issues 38/39 stay blocked", True),
        ("closes issue #7", True),
        ("BUTR+RR as seed 000 re-ranks", True),
        ("seeds 000 / 001", True),
        ("Seed 003's NGSM", True),
        ("BUTR+RR (Nikolaus et al., 2019)", False),
        ("see https://github.com/microsoft/onnxruntime/issues/21577", False),
        ("trained on seeds 0, 1 and 2", False),
        ("--seed 7", False),
    ],
)
def test_the_patterns(line: str, offends: bool) -> None:
    assert bool(offending_lines(line)) is offends


def test_no_product_text_names_an_issue_or_a_paper_code() -> None:
    files = product_files()
    assert len(files) > 300  # the product's text was found
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary or removed in the working tree
        found += [f"{path.relative_to(ROOT)}:{n}: {line[:120]}" for n, line in offending_lines(text)]
    assert not found, f"{len(found)} lines name an issue number or a paper file code:\n" + "\n".join(found)
