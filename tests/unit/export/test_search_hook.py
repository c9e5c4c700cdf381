"""The search-hook study's pure parts: what a configuration asks of the engine, which scenes count for
false composition, the figures with their intervals, and the selection rule fixed before the
development run."""

from __future__ import annotations

from typing import Any

import pytest

from compcap_lab.studies.search_hook import BUTD, BUTR_RR, FC_LIMIT, carries, choose, guided, paired, summary
from service.text.concepts import ConceptPair


def test_configurations_are_request_options() -> None:
    assert BUTD.options() == {
        "model": "butd",
        "beam_size": 5,
        "n_best": 5,
        "rerank": False,
        "rerank_weight": 0.0,
        "hooks": None,
    }
    assert BUTR_RR.options()["beam_size"] == 100 and BUTR_RR.options()["rerank"] is True
    config = guided(20, 5.0, every=2, pool=10, ranker="vsepp", rerank=False)
    assert config.name == "guided b20 λ5 k2 p10 vsepp no-RR"
    assert config.options()["hooks"] == [
        {"name": "ranker_guided", "params": {"weight": 5.0, "every": 2, "pool": 10, "ranker": "vsepp"}}
    ]
    assert config.options()["rerank_weight"] == 0.0


def test_false_composition_scenes_hold_both_constituents_but_not_the_pair() -> None:
    pair = ConceptPair("adjective", "black", "cat")
    cat_and_black_table = {
        "objects": [
            {"noun": "cat", "colour": "white", "size": "big", "action": None},
            {"noun": "table", "colour": "black", "size": "small", "action": None},
        ]
    }
    assert carries(cat_and_black_table, pair) == (True, False)
    black_cat = {"objects": [{"noun": "cat", "colour": "black", "size": "big", "action": "sit"}]}
    assert carries(black_cat, pair) == (True, True)
    assert carries({"objects": []}, pair) == (False, False)
    verb = ConceptPair("verb", "eat", "man")
    assert carries({"objects": [{"noun": "man", "colour": "red", "size": "big", "action": "eat"}]}, verb)[1]


def hits(recall: dict[str, list[float]], fc: dict[str, list[float]], cider: list[float]) -> dict[str, Any]:
    return {"recall": recall, "fc": fc, "cider": cider}


def test_summary_gives_each_figure_with_its_interval() -> None:
    out = summary(hits({"a": [1.0, 0.0], "b": [0.0, 0.0, 0.0]}, {"a": [0.0, 1.0, 0.0, 0.0]}, [0.5, 1.5]))
    assert out["recall_at_5"]["estimate"] == pytest.approx(25.0)  # mean over pairs of (1/2, 0)
    assert out["recall_at_5"]["low"] <= 25.0 <= out["recall_at_5"]["high"]
    assert out["recall_at_5"]["groups"] == 2 and out["recall_at_5"]["units"] == 5
    assert out["false_composition_at_5"]["estimate"] == pytest.approx(25.0)
    assert out["cider_d"]["estimate"] == pytest.approx(100.0)
    assert out["pair_images"] == {"a": 2, "b": 3}


def row(recall: float, cider: float, fc: float) -> dict[str, Any]:
    return {
        "recall_at_5": {"estimate": recall},
        "cider_d": {"estimate": cider},
        "false_composition_at_5": {"estimate": fc},
    }


def test_choice_is_the_best_recall_within_the_quality_bounds() -> None:
    limit = 100 * FC_LIMIT
    rows = {
        "BUTD": row(3.0, 100.0, 1.0),
        "guided a": row(20.0, 85.0, 1.0),  # CIDEr-D below 90% of BUTD's
        "guided b": row(15.0, 95.0, limit + 1),  # false composition too high
        "guided c": row(12.0, 91.0, limit),
    }
    assert choose(rows) == "guided c"
    rows["guided c"] = row(12.0, 89.0, 0.0)
    assert choose(rows) == "guided b"  # nothing meets both: the best recall within the CIDEr-D bound
    rows["guided b"] = row(15.0, 80.0, 0.0)
    assert choose(rows) == "guided c"  # nothing within the bound: the best CIDEr-D
    with pytest.raises(ValueError, match="no guided"):
        choose({"BUTD": rows["BUTD"]})


def test_paired_compares_the_same_units() -> None:
    rows = {
        "x": {"_hits": hits({"a": [1.0, 1.0, 0.0], "b": [1.0]}, {}, [])},
        "y": {"_hits": hits({"a": [0.0, 1.0, 0.0], "b": [0.0]}, {}, [])},
    }
    out = paired(rows, "x", "y")
    assert out is not None and out["difference"] == pytest.approx(100 * (1 / 3 + 1) / 2, abs=0.01)
    assert 0 < out["p_value"] <= 1


def test_extra_configurations_parse_from_the_command_line() -> None:
    from compcap_lab.studies.search_hook import parse_config

    assert parse_config("100:5:2:5").name == "guided b100 λ5 k2 p5"
    assert parse_config("40:3:1:10:norr").options()["rerank"] is False
    with pytest.raises(ValueError, match="BEAM:WEIGHT"):
        parse_config("40:3")
