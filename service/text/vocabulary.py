"""Tokenisation and the word vocabulary with its special tokens."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens; punctuation and digits are dropped."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Vocabulary:
    """Words in id order; ids 0..3 are ``<pad> <bos> <eos> <unk>``."""

    words: tuple[str, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if tuple(self.words[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"words must start with {SPECIALS}")
        if len(set(self.words)) != len(self.words):
            raise ValueError("words must be unique")
        object.__setattr__(self, "index", {w: i for i, w in enumerate(self.words)})

    pad_id = 0
    bos_id = 1
    eos_id = 2
    unk_id = 3
    subword = False  # a word vocabulary: ``index`` maps every word to its id
    special_ids = frozenset(range(len(SPECIALS)))

    def __len__(self) -> int:
        return len(self.words)

    @classmethod
    def build(cls, captions: Iterable[str], min_count: int = 1) -> Vocabulary:
        """Vocabulary of every token seen at least ``min_count`` times, most frequent first."""
        counts = Counter(tok for caption in captions for tok in tokenize(caption))
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        return cls(SPECIALS + tuple(kept))

    def encode(self, text: str) -> list[int]:
        """Word ids of ``text`` without BOS/EOS; unknown words map to ``<unk>``."""
        return [self.index.get(tok, self.unk_id) for tok in tokenize(text)]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of ``ids``, stopping at EOS and skipping PAD/BOS."""
        out: list[str] = []
        for i in (int(x) for x in ids):
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.words[i] if 0 <= i < len(self.words) else UNK)
        return " ".join(out)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"words": list(self.words)}, indent=0), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        return cls(tuple(json.loads(Path(path).read_text(encoding="utf-8"))["words"]))


def encode_batch(
    vocab: Vocabulary, captions: Sequence[str], max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Encode captions as ``tokens`` int64 [B, max_length + 2] = BOS w1..wn EOS PAD..., and ``lengths``
    int64 [B] = n + 2 (BOS and EOS counted). Captions longer than ``max_length`` words are cut."""
    tokens = np.zeros((len(captions), max_length + 2), dtype=np.int64)
    lengths = np.zeros(len(captions), dtype=np.int64)
    for row, caption in enumerate(captions):
        ids = [vocab.bos_id, *vocab.encode(caption)[:max_length], vocab.eos_id]
        tokens[row, : len(ids)] = ids
        lengths[row] = len(ids)
    return tokens, lengths
