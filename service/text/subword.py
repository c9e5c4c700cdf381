"""A subword captioner's tokens (model contract version 2): a ``tokenizers`` ``tokenizer.json`` with the
ids of its start, end and padding tokens. It answers what the engine asks of a vocabulary — its size,
which ids are special, the text of a caption's ids — while ``index`` (word → id) is empty: a word of
a subword model may be several tokens, and the hooks that take words say so instead of guessing."""

from __future__ import annotations

import json
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from service.text.vocabulary import Vocabulary


@dataclass(frozen=True)
class SubwordVocabulary:
    tokenizer: Any  # tokenizers.Tokenizer
    size: int
    bos_id: int
    eos_id: int
    pad_id: int
    index: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    subword = True

    def __len__(self) -> int:
        return self.size

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset({self.bos_id, self.eos_id, self.pad_id})

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of ``ids`` (stopping at the end token, skipping start and padding), as the tokenizer
        decodes it."""
        seq = [int(x) for x in ids]
        if seq and seq[0] == self.bos_id:  # the start token (which may also be the end token, as GPT-2's)
            seq = seq[1:]
        out: list[int] = []
        for i in seq:
            if i == self.eos_id:
                break
            if i not in (self.bos_id, self.pad_id):
                out.append(i)
        return str(self.tokenizer.decode(out, skip_special_tokens=True)).strip()

    def word_sequences(self, word: str) -> list[list[int]]:
        """The token sequences of ``word`` in a caption: after a space, and at the caption's start
        (without one), each once (a tokenizer that marks word starts itself gives one)."""
        out: list[list[int]] = []
        for text in (" " + word, word):
            ids = self.encode(text)
            if ids and ids not in out:
                out.append(ids)
        return out

    @cached_property
    def unknown_id(self) -> int | None:
        """The tokenizer's unknown token, if its model has one (BPE, WordPiece and WordLevel name it,
        Unigram gives its id; a byte-level BPE such as GPT-2's never needs one)."""
        model = self.tokenizer.model
        if type(model).__name__ == "Unigram":  # the bindings do not expose its unk_id
            unk = json.loads(self.tokenizer.to_str())["model"].get("unk_id")
            return int(unk) if isinstance(unk, int) else None
        token = getattr(model, "unk_token", None)
        found = self.tokenizer.token_to_id(token) if isinstance(token, str) else None
        return int(found) if found is not None else None

    def encodable_words(self) -> Container[str]:
        """The words the tokenizer writes without its unknown token (as they follow a space): what the
        ``synonym_substitution`` hook's default table may hold for this captioner."""
        vocab, unknown = self, self.unknown_id

        class Encodable:
            def __contains__(self, word: object) -> bool:
                if not isinstance(word, str) or not word.strip():
                    return False
                ids = vocab.encode(" " + word.strip())
                return bool(ids) and unknown not in ids

        return Encodable()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no start or end token)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    @classmethod
    def load(cls, path: str | Path, size: int, bos_id: int, eos_id: int, pad_id: int) -> SubwordVocabulary:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path))
        if tokenizer.get_vocab_size(with_added_tokens=True) > size:
            raise ValueError(
                f"{path}: {tokenizer.get_vocab_size()} tokens, more than the model's {size} logits"
            )
        return cls(tokenizer, size, bos_id, eos_id, pad_id)


TokenVocabulary = Vocabulary | SubwordVocabulary  # a captioner's tokens: the repository's words, or its own


__all__ = ["SubwordVocabulary", "TokenVocabulary"]
