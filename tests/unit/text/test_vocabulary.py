from __future__ import annotations

import numpy as np
import pytest

from service.text.concepts import load_concepts
from service.text.vocabulary import Vocabulary, encode_batch, tokenize


def test_tokenize_lowercases_and_drops_punctuation() -> None:
    assert tokenize("A Big, black cat -- lying on 2 mats.") == [
        "a",
        "big",
        "black",
        "cat",
        "lying",
        "on",
        "mats",
    ]


def test_round_trip_and_unknown_words() -> None:
    vocab = Vocabulary.build(["a black cat", "a white dog on the grass"])
    text = "a white cat on the grass"
    assert vocab.decode(vocab.encode(text)) == text
    ids = vocab.encode("a purple cat")
    assert ids[1] == vocab.unk_id
    assert vocab.decode([vocab.bos_id, *vocab.encode("a cat"), vocab.eos_id, 7, 8]) == "a cat"


def test_save_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    vocab = Vocabulary.build(["a dog", "a dog", "two cats"])
    vocab.save(tmp_path / "v.json")
    assert Vocabulary.load(tmp_path / "v.json") == vocab
    assert vocab.words[4] == "a"  # most frequent first after the specials


def test_rejects_bad_specials() -> None:
    with pytest.raises(ValueError, match="words must start"):
        Vocabulary(("a", "b", "c", "d"))


def test_encode_batch_layout() -> None:
    vocab = Vocabulary.build(["a black cat", "a dog"])
    tokens, lengths = encode_batch(vocab, ["a black cat", "a dog"], max_length=5)
    assert tokens.shape == (2, 7) and tokens.dtype == np.int64
    assert list(lengths) == [5, 4]
    assert tokens[0, 0] == vocab.bos_id and tokens[0, 4] == vocab.eos_id and tokens[1, 4] == vocab.pad_id


def test_concept_inventory_has_the_seed_groups() -> None:
    concepts = load_concepts()
    groups = concepts.pair_groups
    assert [len(g) for g in groups] == [6, 6, 6, 6]
    assert [p.label for p in concepts.group(1)] == [
        "black cat",
        "big bird",
        "red bus",
        "small plane",
        "eat man",
        "lie woman",
    ]
    for group in groups:
        for pair in group:
            assert pair.noun in concepts.nouns
            assert concepts.synonyms(pair.modifier)
    with pytest.raises(ValueError, match=r"group must be in \[1, 4\], got 5"):
        concepts.group(5)
