"""The imported architectures' registry (``export.hf.architectures``): one record per ``model_type``,
holding its role, its transformers class and its ``adapt``; a snapshot is recognised through it, and an
architecture registered here (a record of a test's own) is recognised like the built-in ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from export.hf import architectures
from export.hf.architecture import Architecture
from export.hf.architectures import ARCHITECTURES, get_architecture, read_snapshot, register, supported
from export.hf.snapshot import SnapshotError


def test_one_record_per_model_type_of_the_four_architectures() -> None:
    assert {t: (r.role, r.model_type) for t, r in ARCHITECTURES.items()} == {
        "vision-encoder-decoder": ("captioner", "vision-encoder-decoder"),
        "blip": ("captioner", "blip"),
        "git": ("captioner", "git"),
        "clip": ("ranker", "clip"),
    }
    assert supported().startswith(
        "VisionEncoderDecoderModel, e.g. ViT + GPT-2 (model_type vision-encoder-decoder); "
        "BlipForConditionalGeneration (model_type blip); "
    )


def _snapshot(tmp_path: Path, model_type: str) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return tmp_path


def test_a_snapshot_is_recognised_by_its_record(tmp_path: Path) -> None:
    found = read_snapshot(_snapshot(tmp_path, "git"))
    assert (found.model_type, found.role, found.architecture) == ("git", "captioner", "GitForCausalLM")
    with pytest.raises(SnapshotError, match=r"model_type 'bert'; importable: VisionEncoderDecoderModel"):
        read_snapshot(_snapshot(tmp_path, "bert"))
    with pytest.raises(SnapshotError, match=r"no config\.json"):
        read_snapshot(tmp_path / "absent")


@pytest.fixture
def toy() -> Iterator[Architecture]:
    record = Architecture("toy-ranker", "ranker", "ToyModel", lambda snapshot, pre: None)  # type: ignore[arg-type, return-value]
    register(record)
    yield record
    architectures.ARCHITECTURES.pop(record.model_type)


def test_an_architecture_is_one_record(tmp_path: Path, toy: Architecture) -> None:
    assert get_architecture("toy-ranker") is toy
    assert read_snapshot(_snapshot(tmp_path, "toy-ranker")).architecture == "ToyModel"
    assert "ToyModel (model_type toy-ranker)" in supported()
    with pytest.raises(ValueError, match="registered already"):
        register(toy)


def test_a_record_rejects_a_bad_role() -> None:
    with pytest.raises(ValueError, match="role"):
        Architecture("x", "decoder", "X", lambda snapshot, pre: None)  # type: ignore[arg-type, return-value]
