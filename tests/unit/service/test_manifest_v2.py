"""Model contract version 2 on the tiny repository's manifest: a captioner with its own encoder and
subword tokenizer validates only as version 2 and with a ``captioner_encoder`` init model; the engine's
token ids and banned ids follow the captioner; a subword vocabulary decodes with its tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from compcap_lab.snapshots.tokenizer import bpe
from service.engine.tokens import banned_ids, token_ids
from service.manifest import Manifest, load_manifest
from service.text.subword import SubwordVocabulary


def with_imported(manifest: Manifest, version: int = 2, role: str = "captioner_encoder") -> dict[str, Any]:
    raw = manifest.model_dump()
    raw["format_version"] = version
    encoder = {**raw["models"][0], "name": "x_encoder", "role": role, "owner": "x"}
    step = {**next(m for m in raw["models"] if m["role"] == "captioner_step"), "name": "x_step", "owner": "x"}
    raw["models"] += [encoder, step]
    cap = {**raw["captioners"][0], "name": "x", "init": "x_encoder", "step": "x_step", "ranker": None}
    cap["image"] = {"height": 32, "width": 32, "mean": [0.5] * 3, "std": [0.5] * 3}
    cap["tokens"] = {"file": "tokenizers/x.json", "size": 50, "bos_id": 0, "eos_id": 0, "pad_id": 1}
    raw["captioners"].append(cap)
    return raw


def test_version_2_fields_need_version_2_and_an_encoder(tiny_repo: Path) -> None:
    manifest = load_manifest(tiny_repo)
    assert manifest.format_version == 1  # what a build writes
    imported = Manifest.model_validate(with_imported(manifest))
    assert imported.captioner("x").tokens is not None
    with pytest.raises(ValidationError, match="format_version is 1"):
        Manifest.model_validate(with_imported(manifest, version=1))
    with pytest.raises(ValidationError, match="must be a captioner_encoder"):
        Manifest.model_validate(with_imported(manifest, role="captioner_init"))
    with pytest.raises(ValidationError, match="format_version 3"):
        Manifest.model_validate({**manifest.model_dump(), "format_version": 3})
    # token ids per captioner: the word vocabulary's, or the captioner's own
    words = token_ids(imported, manifest.captioners[0].name)
    assert (words.bos, words.eos, words.pad, words.unk) == (1, 2, 0, 3)
    assert banned_ids(imported, manifest.captioners[0].name) == (0, 1, 3)
    assert token_ids(imported, "x").unk is None and banned_ids(imported, "x") == ()  # as generate bans none


def test_a_subword_vocabulary_decodes_with_its_tokenizer(tmp_path: Path) -> None:
    fast = bpe()
    fast.save_pretrained(tmp_path)
    vocab = SubwordVocabulary.load(tmp_path / "tokenizer.json", len(fast), 0, 0, 1)
    ids = vocab.encode("a red bus on the street")
    assert len(ids) > 1 and vocab.decode([0, *ids, 0, 5, 6]) == "a red bus on the street"
    assert vocab.decode([1, *ids]) == "a red bus on the street"  # padding skipped
    assert vocab.subword and not vocab.index and vocab.special_ids == {0, 1}
    with pytest.raises(ValueError, match="more than the model's"):
        SubwordVocabulary.load(tmp_path / "tokenizer.json", 10, 0, 0, 1)


def test_held_out_pairs_are_known_when_trained_here_or_declared_at_import() -> None:
    from service.manifest import EXTERNAL_SPLIT, HeldOutPair, Training

    pair = HeldOutPair(kind="adjective", modifier="red", noun="dog")
    assert Training(split="systematicity/1").held_out_known  # trained here: the split says
    assert not Training(split=EXTERNAL_SPLIT).held_out_known  # imported, nothing declared
    assert Training(split=EXTERNAL_SPLIT, held_out_declared=True).held_out_known  # declared: none held out
    assert Training(split=EXTERNAL_SPLIT, held_out_pairs=[pair]).held_out_known
