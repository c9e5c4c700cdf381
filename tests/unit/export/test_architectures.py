"""``export.models.architectures``: the one record per captioner architecture that the zoo, the default
repository build, the studies and the report read (constructor, what its step reads, its learning rate,
whether it ranks, its place in the zoo)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from compcap_lab.pipeline.zoo import zoo_plan
from compcap_lab.studies.report.collect import rows_for
from export.models.architectures import ARCHITECTURES, Architecture, get_architecture
from export.packaging.package import architecture_entries
from export.presets import get_preset
from service.manifest import Training
from service.text.vocabulary import Vocabulary

# What the zoo and the report hard-coded before the records: display name, what the step reads, the
# preset field of the learning rate (None: train_captioner's default, the preset's learning_rate), ranks.
BEFORE: dict[str, tuple[str, str, str | None, bool]] = {
    "butd": ("BUTD", "last_token", None, False),
    "butr": ("BUTR", "last_token", None, True),
    "sat": ("SAT", "last_token", None, False),
    "transformer": ("Transformer", "prefix", "transformer_learning_rate", False),
    "m2": ("M2", "prefix", "transformer_learning_rate", False),
}


def _manifest(*names: str) -> Any:
    """A stand-in for a manifest listing captioners ``names`` and no rankers (``rows_for`` reads only
    their names; the control rows, which need rankers, are ``test_report_controls``'s)."""
    return SimpleNamespace(captioners=[SimpleNamespace(name=n) for n in names], rankers=[])


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_every_architecture_builds_a_fresh_captioner_that_runs(kind: str) -> None:
    """Teacher forcing: regions [B, R, D], tokens [B, T] → logprobs [B, T-1, V]; the contract step:
    memory, image_index [N], tokens [N, t], length [N], state → logprobs [N, V], attention [N, M]."""
    preset = get_preset("tiny")
    vocab = Vocabulary.build(["a red bus on a road", "a black cat"])
    regions = preset.grid * preset.grid
    arch = get_architecture(kind)
    first = arch.build(len(vocab), preset.region_dim, regions, preset)
    second = arch.build(len(vocab), preset.region_dim, regions, preset)
    assert isinstance(first, nn.Module) and first is not second
    assert sum(p.numel() for p in first.parameters()) > 0
    first.eval()
    feats = torch.rand(2, regions, preset.region_dim)
    tokens = torch.randint(4, len(vocab), (2, 5))
    tokens[:, 0] = 1
    with torch.no_grad():
        assert first(feats, tokens).shape == (2, 4, len(vocab))
        memory, state = first.init(feats)
        logprobs, _, attention = first.step(
            memory, torch.tensor([0, 1]), tokens[:, :2], torch.tensor([2, 1]), state
        )
    assert logprobs.shape == (2, len(vocab)) and attention.shape == (2, memory.size(1))


def test_unknown_architecture_is_a_clear_key_error() -> None:
    with pytest.raises(KeyError, match="lstm"):
        get_architecture("lstm")


def test_records_agree_with_what_the_zoo_used_before() -> None:
    p = get_preset("default")
    assert set(ARCHITECTURES) == set(BEFORE)
    for kind, (display, reads, rate_field, ranks) in BEFORE.items():
        arch = ARCHITECTURES[kind]
        assert (arch.name, arch.display, arch.reads, arch.ranks) == (kind, display, reads, ranks)
        assert arch.learning_rate(p) == getattr(p, rate_field or "learning_rate")
    assert ARCHITECTURES["butr"].ranker_display == "BUTR ranking head"
    assert [a.name for a in ARCHITECTURES.values() if a.zoo_full] == ["butd"]  # the report's one FULL row


def test_butd_and_butr_share_one_architecture() -> None:
    """BUTD is BUTR trained without its ranking loss (``train_captioner(rank=...)``): same network."""
    preset = get_preset("tiny")
    regions = preset.grid * preset.grid
    butd = ARCHITECTURES["butd"].build(7, preset.region_dim, regions, preset)
    butr = ARCHITECTURES["butr"].build(7, preset.region_dim, regions, preset)
    assert type(butd) is type(butr)
    shapes = [{k: v.shape for k, v in m.state_dict().items()} for m in (butd, butr)]
    assert shapes[0] == shapes[1]


def test_zoo_plan_is_the_one_it_was() -> None:
    """The same captioners in the same order (the k-th is initialised with seed + k)."""
    assert zoo_plan((1, 2, 3, 4)) == [
        *[(arch, g) for g in (1, 2, 3, 4) for arch in ("butd", "butr")],
        ("sat", 1),
        ("transformer", 1),
        ("m2", 1),
        ("butd", None),
    ]
    assert zoo_plan((2,), extra_group=3) == [
        ("butd", 2),
        ("butr", 2),
        ("sat", 3),
        ("transformer", 3),
        ("m2", 3),
        ("butd", None),
    ]


def test_report_rows_are_the_ones_they_were() -> None:
    names = [f"{kind}_g{g}" for kind, g in zoo_plan((1, 2)) if g is not None] + ["butd_full"]
    rows = rows_for(_manifest(*names), (1, 2))
    assert list(rows) == ["SAT", "BUTD", "BUTR", "BUTR+RR", "Transformer", "M2", "FULL"]
    assert rows["SAT"] == [(1, "sat_g1", None)]
    assert rows["BUTR"] == [(1, "butr_g1", None), (2, "butr_g2", None)]
    assert rows["BUTR+RR"] == [(1, "butr_g1", "butr_g1"), (2, "butr_g2", "butr_g2")]
    assert rows["FULL"] == [(1, "butd_full", None), (2, "butd_full", None)]
    assert list(rows_for(_manifest("butd_g1"), (1,))) == ["BUTD"]


def test_a_new_record_reaches_the_zoo_plan_and_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding an architecture is one record: the zoo trains it and the report gets its rows."""
    new = replace(ARCHITECTURES["butr"], name="lstm", display="LSTM", zoo="extra_group")
    monkeypatch.setitem(ARCHITECTURES, "lstm", new)
    assert zoo_plan((1, 2))[-2:] == [("lstm", 1), ("butd", None)]
    rows = rows_for(_manifest("lstm_g1", "butd_g1"), (1,))
    assert rows["LSTM+RR"] == [(1, "lstm_g1", "lstm_g1")] and list(rows)[-2:] == ["LSTM", "LSTM+RR"]


def test_entries_follow_the_record() -> None:
    """A ranking architecture brings its ranking head as a ranker of the captioner's name, joint with it."""
    training = Training(dataset="d", images=1, epochs=1, seconds=0.0, split="full")
    model = nn.Linear(1, 1)
    butr, rankers = architecture_entries(ARCHITECTURES["butr"], "butr_g1", model, training)
    assert (butr.name, butr.architecture, butr.reads, butr.ranker) == (
        "butr_g1",
        "BUTR",
        "last_token",
        "butr_g1",
    )
    assert [(r.name, r.architecture, r.joint_with, r.model is model) for r in rankers] == [
        ("butr_g1", "BUTR ranking head", "butr_g1", True)
    ]
    m2, none = architecture_entries(ARCHITECTURES["m2"], "m2_g1", model, training)
    assert (m2.architecture, m2.reads, m2.ranker, none) == ("M2", "prefix", None, [])


def test_reading_the_records_needs_no_torch() -> None:
    """The report reads the records; the model classes (and torch) load only when a captioner is built."""
    code = (
        "import sys\n"
        "from export.models.architectures import ARCHITECTURES\n"
        "import compcap_lab.studies.report.collect\n"
        "assert ARCHITECTURES['m2'].reads == 'prefix'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_records_are_frozen_and_checked() -> None:
    with pytest.raises(AttributeError):
        ARCHITECTURES["butd"].ranks = True  # type: ignore[misc]
    assert all(isinstance(a, Architecture) and a.name == k for k, a in ARCHITECTURES.items())
    with pytest.raises(ValueError, match="lstm_learning_rate"):
        replace(ARCHITECTURES["butd"], learning_rate_field="lstm_learning_rate")
