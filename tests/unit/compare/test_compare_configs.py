"""Compared configurations (text forms, defaults from a manifest) and the discrepancy reservoir."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.compare.configs import (
    Configuration,
    ConfigurationError,
    check_unique,
    default_configurations,
    parse_configuration,
)
from service.compare.reservoir import DiscrepancyReservoir, ReservoirItem
from service.manifest import load_manifest


def test_text_forms() -> None:
    assert parse_configuration("butd_g1") == Configuration("butd_g1", {"model": "butd_g1"})
    rr = parse_configuration("BUTR+RR=butr_g1?beam_size=100&rerank=true&rerank_weight=0.5")
    assert rr.name == "BUTR+RR"
    assert dict(rr.options) == {"model": "butr_g1", "beam_size": 100, "rerank": True, "rerank_weight": 0.5}
    weak = parse_configuration(
        'WEAK={"model": "butd", "beam_size": 1, '
        '"hooks": [{"name": "ban_words", "params": {"words": ["red"]}}]}'
    )
    assert weak.model == "butd" and weak.options["hooks"][0]["name"] == "ban_words"
    assert parse_configuration("X=butr?rerank=vsepp").options["rerank"] == "vsepp"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("A=butd?beam=3", "options"),  # unknown option
        ("A=butd?beam_size=three", "beam_size"),
        ("A={not json", "options"),
        ('A={"beam_size": 3}', "model"),
        ("bad name=butd", "name"),
        ("A=butd?model=butr", "options"),
    ],
)
def test_bad_text_names_the_part(text: str, field: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_configuration(text)
    assert err.value.field == field


def test_a_misspelt_option_gets_did_you_mean() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown option 'beamsize' \(did you mean 'beam_size'\?\)"):
        parse_configuration("A=butd?beamsize=3")
    with pytest.raises(ConfigurationError, match=r"\['rerank_wieght'\] \(did you mean 'rerank_weight'\?\)"):
        parse_configuration('A={"model": "butd", "rerank_wieght": 0.1}')


def test_unique_and_at_least_two() -> None:
    a, b = Configuration("A", {"model": "x"}), Configuration("B", {"model": "x"})
    check_unique([a, b])
    with pytest.raises(ConfigurationError, match="two or more"):
        check_unique([a])
    with pytest.raises(ConfigurationError, match="repeated"):
        check_unique([a, a])


def test_defaults_follow_the_seed_line_up(tiny_repo: Path) -> None:
    configs = default_configurations(load_manifest(tiny_repo))  # captioners butr (with ranker), butd
    assert [c.name for c in configs] == ["BUTD", "BUTR", "BUTR+RR"]
    by = {c.name: dict(c.options) for c in configs}
    assert by["BUTR"] == {"model": "butr", "rerank": False}
    assert by["BUTR+RR"] == {"model": "butr", "beam_size": 100, "rerank": True}


def item(similarity: float, tie: float = 0.0, size: int = 10, tag: str = "") -> ReservoirItem:
    return ReservoirItem(similarity, tie, {"tag": tag}, size)


def test_reservoir_keeps_the_k_most_discrepant() -> None:
    r = DiscrepancyReservoir(capacity=3, max_bytes=10_000)
    for k, s in enumerate([0.9, 0.1, 0.5, 0.05, 0.7, 0.3]):
        r.add(item(s, tag=str(k)))
    assert [i.similarity for i in r.items()] == [0.05, 0.1, 0.3]
    assert r.seen == 6 and r.bytes == 30
    assert not r.add(item(0.95))  # more similar than everything kept
    # ties at S = 0 are ordered by the tie-break: the one that still shares more goes first
    r2 = DiscrepancyReservoir(capacity=2, max_bytes=10_000)
    for tie in (0.4, 0.1, 0.3):
        r2.add(item(0.0, tie))
    assert [i.tie_break for i in r2.items()] == [0.1, 0.3]


def test_reservoir_byte_bound() -> None:
    r = DiscrepancyReservoir(capacity=10, max_bytes=100)
    for k in range(10):
        r.add(item(k / 10, size=30))
    assert r.bytes <= 100 and len(r) == 3
    assert [i.similarity for i in r.items()] == [0.0, 0.1, 0.2]
    assert not r.add(item(0.0, size=101))  # larger than the whole budget
    with pytest.raises(ValueError, match="capacity"):
        DiscrepancyReservoir(capacity=0, max_bytes=1)
