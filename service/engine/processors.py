"""Logits processors: the maths of the per-request decoding hooks, in the HF ``LogitsProcessor`` shape
(one small class each, its arguments checked in ``__init__``: a bad one raises ``ValueError`` naming it).

A processor is ``proc(tokens: int64 [N, T], logprobs: float32 [N, V]) -> float32 [N, V]``: ``tokens``
are the rows' prefixes ``BOS w1..wt`` (``T = t + 1``, no padding: all rows of one request have ``t``
words), ``logprobs`` the next-word log-probs of the same rows. A processor returns a new array and
never modifies its inputs; it works on token ids only. ``BeamBatch.advance`` applies a request's
processors, in order, to that request's live rows only, between two passes of the search's hard
constraints (banned ids, no EOS before ``min_length`` words, only EOS at ``max_length``).

* ``BanWords(ids)`` — the words never appear.
* ``NoRepeatNgram(n)`` — no n-gram twice in a caption (``n=2`` also stops seed 003's "dog dog dog").
* ``SynonymSubstitution(pairs)`` — seed 001 §4.3: per row, when the argmax word is in S1 its S2
  synonym gets log-prob 0 and every other word ``-inf``. Which pairs to use (explicit, or the
  substitutivity word table of ``service.text.synonyms``) is the hook's business (``service.engine.hooks``).

Which JSON hook builds which processor (and the hooks that are search parameters instead, such as
``min_length`` and ``diverse_beam``) is the hook registry's business: ``service.engine.hooks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

NEG_INF = -np.inf


@runtime_checkable
class LogitsProcessor(Protocol):
    """``proc(tokens int64 [N, T], logprobs float [N, V]) -> float [N, V]`` (a new array)."""

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray: ...


def _int_arg(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class BanWords:
    """Set the log-prob of every word in ``ids`` to ``-inf``."""

    def __init__(self, ids: Sequence[int]) -> None:
        arr = np.asarray(list(ids))
        if arr.size == 0:
            raise ValueError("ids must not be empty")
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer) or (arr < 0).any():
            raise ValueError(f"ids must be non-negative integers, got {list(ids)!r}")
        self.ids = np.unique(arr.astype(np.int64))

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        if self.ids[-1] >= logprobs.shape[1]:
            raise ValueError(f"ids must be < V={logprobs.shape[1]}, got {int(self.ids[-1])}")
        out = np.array(logprobs)
        out[:, self.ids] = NEG_INF
        return out


class BanSequences:
    """Never complete a token sequence of ``sequences`` (a word of a subword model, several tokens): a
    sequence of one token is banned outright, a longer one has its last token banned on the rows whose
    prefix ends with the rest — transformers' ``NoBadWordsLogitsProcessor``."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        seqs = [tuple(int(t) for t in s) for s in sequences]
        if not seqs or any(not s or min(s) < 0 for s in seqs):
            raise ValueError(f"sequences must be non-empty lists of token ids, got {sequences!r}")
        self.single = np.unique([s[0] for s in seqs if len(s) == 1]).astype(np.int64)
        self.longer = sorted({s for s in seqs if len(s) > 1})

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        out = np.array(logprobs)
        if self.single.size:
            out[:, self.single] = NEG_INF
        for seq in self.longer:
            head = np.asarray(seq[:-1], dtype=np.int64)
            if tokens.shape[1] >= head.size:
                rows = (tokens[:, tokens.shape[1] - head.size :] == head).all(axis=1)
                out[rows, seq[-1]] = NEG_INF
        return out


class NoRepeatNgram:
    """Ban every word that would complete an ``n``-gram already in the row's prefix (BOS included, as
    HF's ``NoRepeatNGramLogitsProcessor``); ``n=1`` bans every word already used."""

    def __init__(self, n: int) -> None:
        self.n = _int_arg("n", n, 1)

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        out = np.array(logprobs)
        n, t = self.n, tokens.shape[1]
        if t < n:
            return out
        windows = sliding_window_view(tokens, n, axis=1)  # [N, t - n + 1, n]: every n-gram so far
        current = tokens[:, t - n + 1 :]  # [N, n - 1]: the prefix a new n-gram would start with
        match = (windows[:, :, :-1] == current[:, None, :]).all(axis=2)  # [N, t - n + 1]
        rows, pos = np.nonzero(match)
        out[rows, windows[rows, pos, -1]] = NEG_INF
        return out


class SynonymSubstitution:
    """Seed 001 §4.3: per row, if the most likely next word is in S1 (a key of ``pairs``), put all the
    probability on its S2 synonym. Ties go to the lowest word id. ``substitutions`` counts the rows
    substituted so far."""

    def __init__(self, pairs: Mapping[int, int] | Sequence[tuple[int, int]]) -> None:
        items = list(pairs.items()) if isinstance(pairs, Mapping) else [tuple(p) for p in pairs]
        if not items:
            raise ValueError("pairs must not be empty")
        table: dict[int, int] = {}
        for item in items:
            if len(item) != 2:
                raise ValueError(f"pairs must be (S1 id, S2 id) pairs, got {item!r}")
            src, dst = _int_arg("pairs", item[0], 0), _int_arg("pairs", item[1], 0)
            if src == dst:
                raise ValueError(f"pairs must map a word to another word, got {src} -> {dst}")
            if table.get(src, dst) != dst:
                raise ValueError(f"pairs map word {src} to both {table[src]} and {dst}")
            table[src] = dst
        order = sorted(table)
        self.src = np.asarray(order, dtype=np.int64)
        self.dst = np.asarray([table[s] for s in order], dtype=np.int64)
        self.substitutions = 0

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        if max(self.src[-1], self.dst.max()) >= logprobs.shape[1]:
            raise ValueError(f"pairs must hold word ids < V={logprobs.shape[1]}")
        out = np.array(logprobs)
        best = out.argmax(axis=1)
        pos = np.minimum(np.searchsorted(self.src, best), self.src.size - 1)
        hit = (self.src[pos] == best) & np.isfinite(out.max(axis=1))
        rows = np.flatnonzero(hit)
        if rows.size:
            out[rows] = NEG_INF
            out[rows, self.dst[pos[rows]]] = 0.0
            self.substitutions += int(rows.size)
        return out


__all__ = ["NEG_INF", "BanWords", "LogitsProcessor", "NoRepeatNgram", "SynonymSubstitution"]
