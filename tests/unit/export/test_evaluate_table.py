"""``compcap-lab evaluate``'s table prints recall as the API reports it: a fraction in [0, 1] (three
decimals), never a percentage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compcap_lab.studies import evaluate as module


def test_the_table_prints_recall_as_a_fraction(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {
        "captioner": "butr_g1",
        "ranker": "butr_g1",
        "trained_on": "systematicity_g1",
        "recall_at_k": {"1": 0.125, "5": 0.263},
        "bleu1": 0.5,
        "bleu4": 0.2,
        "meteor": None,
        "rouge_l": 0.4,
        "cider_d": 0.8,
        "asl": 9.0,
        "types": 40,
        "ttr1": 0.3,
        "ttr2": 0.5,
        "novel": 0.1,
    }

    def fake_evaluate(*_: Any, **__: Any) -> dict[str, Any]:
        return {"images": 4, "results": [row, {**row, "ranker": None, "recall_at_k": None}]}

    monkeypatch.setattr(module, "evaluate", fake_evaluate)
    assert module.run_evaluate_cli(Path("r"), Path("d"), None, "systematicity", 1, None) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "recall R@1, R@5: fractions in [0, 1]" in lines[1]
    assert lines[2].split()[2:4] == ["R@1", "R@5"]
    assert lines[3].split()[2:4] == ["0.125", "0.263"]
    assert lines[4].split()[2:4] == ["-", "-"]
