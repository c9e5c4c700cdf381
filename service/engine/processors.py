"""Logits processors: the maths of the per-request decoding hooks, in the HF ``LogitsProcessor`` shape
(one small class each, its arguments checked in ``__init__``: a bad one raises ``ValueError`` naming it).

A processor is ``proc(tokens: int64 [N, T], logprobs: float32 [N, V]) -> float32 [N, V]``: ``tokens``
are the rows' prefixes ``BOS w1..wt`` (``T = t + 1``, no padding: all rows of one request have ``t``
words), ``logprobs`` the next-word log-probs of the same rows. A processor returns a new array and
never modifies its inputs; it works on token ids only. ``BeamBatch.advance`` applies a request's
processors, in order, to that request's live rows only, between two passes of the search's hard
constraints (banned ids, no EOS before ``min_length`` words, only EOS at ``max_length``).

* ``BanWords(ids)`` — the words never appear.
* ``NoRepeatNgram(n)`` — no n-gram twice in a caption (``n=2`` also stops the duplicated captions of
  Wan et al., 2022: "dog dog dog").
* ``RankerGuide(every, weight, pool, ranker)`` — the ``ranker_guided`` hook's parameters; its maths
  (``guide_candidates``, ``guide_bonus``, ``apply_guide``) shapes a request's log-probs with a ranker's
  cosine between each partial caption and the image; the ranker calls are the engine's
  (``service.engine.guide``), made before the step's selection.
* ``SynonymSubstitution(pairs)`` — Pantazopoulos et al., 2022, §4.3: per row, when the argmax token starts
  an S1 word, its S2 synonym's first token gets log-prob 0 and every other token ``-inf``; an S2 word of
  several tokens is then forced to its end, one token per step (the state keyed on the row's prefix). Which
  pairs to use (explicit, or the substitutivity word table of ``service.text.synonyms``) is the hook's
  business (``service.engine.hooks``).

Which JSON hook builds which processor (and the hooks that are search parameters instead, such as
``min_length`` and ``diverse_beam``) is the hook registry's business: ``service.engine.hooks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from service.checks import above, at_most, integer_at_least, within

NEG_INF = -np.inf


@runtime_checkable
class LogitsProcessor(Protocol):
    """``proc(tokens int64 [N, T], logprobs float [N, V]) -> float [N, V]`` (a new array).

    A processor may also act on each row's best candidates instead of its whole row (a step that
    returns its top k, ``service.engine.sparse``): ``sparse(tokens, values, words)`` changes ``values``
    float64 [N, C] (and ``words`` int64 [N, C], each column's word) in place as ``__call__`` would change
    those words' log-probs, and ``sparse_budget(max_length)`` bounds the candidates it may remove from a
    row (the engine asks each row for that many more). The processors here have both; one without
    them makes its request read whole rows."""

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray: ...


def ban_in_place(values: np.ndarray, words: np.ndarray, rows: np.ndarray, banned: np.ndarray) -> None:
    """``values[r, c] = -inf`` where ``words[r, c] == banned[j]`` for ``r = rows[j]`` (row, word pairs):
    a ban on candidate columns. Pure but for ``values``."""
    if rows.size:
        hit = words[rows] == banned[:, None]  # [J, C]
        pair, column = np.nonzero(hit)
        values[rows[pair], column] = NEG_INF


def _int_arg(name: str, value: Any, minimum: int) -> int:
    integer_at_least(minimum, **{name: value})
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

    def sparse(self, tokens: np.ndarray, values: np.ndarray, words: np.ndarray) -> None:
        values[np.isin(words, self.ids)] = NEG_INF

    def sparse_budget(self, max_length: int) -> int:
        return int(self.ids.size)


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

    def sparse(self, tokens: np.ndarray, values: np.ndarray, words: np.ndarray) -> None:
        if self.single.size:
            values[np.isin(words, self.single)] = NEG_INF
        for seq in self.longer:
            head = np.asarray(seq[:-1], dtype=np.int64)
            if tokens.shape[1] >= head.size:
                rows = (tokens[:, tokens.shape[1] - head.size :] == head).all(axis=1)
                values[rows[:, None] & (words == seq[-1])] = NEG_INF

    def sparse_budget(self, max_length: int) -> int:
        return int(self.single.size) + len(self.longer)


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

    def sparse(self, tokens: np.ndarray, values: np.ndarray, words: np.ndarray) -> None:
        n, t = self.n, tokens.shape[1]
        if t < n:
            return
        windows = sliding_window_view(tokens, n, axis=1)
        current = tokens[:, t - n + 1 :]
        rows, pos = np.nonzero((windows[:, :, :-1] == current[:, None, :]).all(axis=2))
        ban_in_place(values, words, rows, windows[rows, pos, -1])

    def sparse_budget(self, max_length: int) -> int:
        return max_length + 1  # at most one word per n-gram of a prefix of BOS + max_length words


Word = tuple[int, ...]  # a word's token ids (one for a word-level vocabulary; as it follows a space)


def _word_arg(value: Any) -> Word:
    """A pair's word: one token id, or a non-empty sequence of them."""
    if isinstance(value, Sequence | np.ndarray) and not isinstance(value, str | bytes):
        if not len(value):
            raise ValueError("pairs must hold non-empty token sequences")
        return tuple(_int_arg("pairs", t, 0) for t in value)
    return (_int_arg("pairs", value, 0),)


def _shown(word: Word) -> int | list[int]:
    """A word in an error message: its id when it is one token, as before words could be several."""
    return word[0] if len(word) == 1 else list(word)


class SynonymSubstitution:
    """Pantazopoulos et al., 2022, §4.3: per row, if the most likely next token starts an S1 word (a key of
    ``pairs``), put all the probability on its S2 synonym's first token (log-prob 0, every other token
    ``-inf``). Ties go to the lowest id. A pair maps a word to a word, each a token id or a sequence of
    token ids (a subword captioner's word as it follows a space).

    An S2 word of several tokens is then written whole: its remaining tokens are forced one per step.
    The search reorders rows between steps, so the state is keyed on the row's whole prefix (``tokens``,
    BOS..last token): a trigger forcing ``t1`` on the prefix ``P`` remembers that ``P + (t1,)`` goes on
    with ``t2..tm``, and a later row with a remembered prefix gets its next token forced (only rows whose
    last token is a first or middle token of some S2 word are looked up). Two rows with the same prefix
    are continued alike, wherever they came from, for as long as the processor lives (one request's
    search, or the requests that share its ``SearchParams``); a dead row (all ``-inf``) stays dead.

    The hook cannot look ahead: an S1 word of several tokens fires on its first token alone (GPT-2-like
    "▁do" starts "dog" and "door" alike), and two S1 words that start with the same token are refused.
    ``substitutions`` counts the triggers so far (not the forced continuation steps). With one-token
    words only, no state is kept."""

    def __init__(self, pairs: Mapping[Any, Any] | Sequence[Any]) -> None:
        items = list(pairs.items()) if isinstance(pairs, Mapping) else [tuple(p) for p in pairs]
        if not items:
            raise ValueError("pairs must not be empty")
        table: dict[Word, Word] = {}
        starts: dict[int, Word] = {}
        for item in items:
            if len(item) != 2:
                raise ValueError(f"pairs must be (S1, S2) pairs, got {item!r}")
            src, dst = _word_arg(item[0]), _word_arg(item[1])
            if src == dst:
                raise ValueError(f"pairs must map a word to another word, got {_shown(src)} -> {_shown(dst)}")
            if table.get(src, dst) != dst:
                raise ValueError(
                    f"pairs map word {_shown(src)} to both {_shown(table[src])} and {_shown(dst)}"
                )
            if starts.setdefault(src[0], src) != src:
                raise ValueError(
                    f"pairs' words {_shown(starts[src[0]])} and {_shown(src)} start with the same token"
                )
            table[src] = dst
        order = sorted(table, key=lambda w: w[0])
        self.src = np.asarray([w[0] for w in order], dtype=np.int64)  # S1 words' first tokens, sorted
        self.dst = np.asarray([table[w][0] for w in order], dtype=np.int64)  # S2 words' first tokens
        self.rest: list[Word] = [table[w][1:] for w in order]  # S2 words' other tokens
        self.inner = np.unique([t for w in table.values() for t in w[:-1]]).astype(np.int64)
        self.top = max(max(w) for pair in table.items() for w in pair)
        self.pending: dict[Word, Word] = {}  # prefix -> the S2 tokens still to write after it
        self.substitutions = 0

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        if self.top >= logprobs.shape[1]:
            raise ValueError(f"pairs must hold word ids < V={logprobs.shape[1]}")
        out = np.array(logprobs)
        for row, word in self._decide(tokens, np.isfinite(out.max(axis=1)), out.argmax(axis=1)):
            out[row] = NEG_INF
            out[row, word] = 0.0
        return out

    def sparse(self, tokens: np.ndarray, values: np.ndarray, words: np.ndarray) -> None:
        """``__call__`` on candidate columns: a row's most likely word is its best column's (ties to the
        lowest id, as ``argmax`` over whole rows); a substituted or forced row becomes one candidate."""
        best_value = values.max(axis=1)
        best = np.where(values == best_value[:, None], words, np.iinfo(np.int64).max).min(axis=1)
        for row, word in self._decide(tokens, np.isfinite(best_value), best):
            _only(values, words, row, word)

    def sparse_budget(self, max_length: int) -> int:
        return 0  # it replaces a row by one candidate of its own, whatever the row's best were

    def _decide(self, tokens: np.ndarray, alive: np.ndarray, best: np.ndarray) -> list[tuple[int, int]]:
        """The (row, word) each row is forced to, given whether it is ``alive`` and its ``best`` word:
        the next S2 token where its prefix is remembered, else the S2 word's first token where its best
        starts an S1 word (remembering the rest of a several-token S2 word)."""
        chosen: list[tuple[int, int]] = []
        forced = np.zeros(alive.shape[0], dtype=bool)
        if self.pending:
            for r in np.flatnonzero(alive & np.isin(tokens[:, -1], self.inner)).tolist():
                prefix = tuple(tokens[r].tolist())
                rest = self.pending.get(prefix)
                if rest is None:
                    continue
                forced[r] = True
                chosen.append((r, rest[0]))
                if len(rest) > 1:
                    self.pending[(*prefix, rest[0])] = rest[1:]
        pos = np.minimum(np.searchsorted(self.src, best), self.src.size - 1)
        hit = (self.src[pos] == best) & alive & ~forced
        for r in np.flatnonzero(hit).tolist():
            p = int(pos[r])
            chosen.append((r, int(self.dst[p])))
            self.substitutions += 1
            if self.inner.size and self.rest[p]:
                self.pending[(*tokens[r].tolist(), int(self.dst[p]))] = self.rest[p]
        return chosen


def _only(values: np.ndarray, words: np.ndarray, row: int, word: int) -> None:
    """Row ``row`` of candidate columns becomes ``word`` alone, at log-prob 0 (in place)."""
    values[row] = NEG_INF
    words[row, 0] = word
    values[row, 0] = 0.0


class ForceWords:
    """Logits processor: row prefixes ``BOS w1..wt`` may only continue with ``words[t]`` (then ``eos``),
    at the model's own log-prob."""

    def __init__(self, words: Sequence[int], eos: int) -> None:
        ids = [int(w) for w in words]
        if not ids:
            raise ValueError("words must not be empty")
        if min(ids) < 0 or eos < 0:
            raise ValueError(f"words and eos must be non-negative ids, got {ids!r}, {eos}")
        self.sequence = np.array([*ids, eos], dtype=np.int64)

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        t = tokens.shape[1] - 1  # words so far
        if t >= len(self.sequence):
            raise ValueError(f"the forced caption ends after {len(self.sequence) - 1} words")
        out = np.full(logprobs.shape, NEG_INF, dtype=logprobs.dtype)
        word = self.sequence[t]
        out[:, word] = logprobs[:, word]
        return out


MAX_GUIDE_WEIGHT = 100.0  # λ of ranker_guided
MAX_GUIDE_POOL = 50  # candidates re-scored per row


class RankerGuide:
    """The ``ranker_guided`` hook's search: every ``every`` words, each live row's ``pool`` most likely
    next words are re-scored by log-prob + ``weight`` × the ranker's cosine between the partial caption
    (prefix + word) and the image (``ranker``: a ranker name, None for the captioner's own). Not a
    ``LogitsProcessor``: it needs a model call, which the scheduler makes (``service.engine.guide``);
    the maths are ``guide_candidates``, ``guide_bonus`` and ``apply_guide``."""

    def __init__(self, every: int, weight: float, pool: int, ranker: str | None = None) -> None:
        self.every = _int_arg("every", every, 1)
        self.pool = _int_arg("pool", pool, 1)
        at_most(MAX_GUIDE_POOL, pool=self.pool)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not np.isfinite(weight):
            raise ValueError(f"weight must be a finite number, got {weight!r}")
        within(0, MAX_GUIDE_WEIGHT, weight=weight)
        if ranker is not None and (not isinstance(ranker, str) or not ranker):
            raise ValueError(f"ranker must be a ranker name, got {ranker!r}")
        self.weight, self.ranker = float(weight), ranker

    def scores_words(self, t: int) -> bool:
        """Whether the step that writes word ``t + 1`` re-scores words (``t`` words so far)."""
        return t % self.every == 0

    def __repr__(self) -> str:
        args = f"every={self.every}, weight={self.weight}, pool={self.pool}, ranker={self.ranker!r}"
        return f"RankerGuide({args})"


def guide_candidates(logprobs: np.ndarray, pool: int, eos: int) -> np.ndarray:
    """Each row's ``pool`` most likely words, best first, the end token excluded.

    logprobs: float [N, V]. Returns int64 [N, P] with P = min(pool, V - 1); a slot is -1 where the row
    has fewer finite words. Ties go to the lower id. Pure."""
    n, v = logprobs.shape
    p = min(pool, v - 1)
    if not n or p <= 0:
        return np.zeros((n, max(p, 0)), dtype=np.int64)
    values = np.asarray(logprobs, dtype=np.float64).copy()
    values[:, eos] = NEG_INF
    order = np.argsort(-values, axis=1, kind="stable")[:, :p]
    finite = np.isfinite(np.take_along_axis(values, order, axis=1))
    return np.where(finite, order, -1).astype(np.int64)


@dataclass(frozen=True)
class GuideBonus:
    """What ``guide_bonus`` adds to a step's log-probs, and the potentials the rows' continuations then
    carry (cosines, for the next re-scoring step's ``potential``). Shapes: N rows, P candidates."""

    words: np.ndarray  # float64 [N, P] added to the candidate words' log-probs (``rest`` in -1 slots)
    rest: np.ndarray  # float64 [N] added to every other word of the row
    eos: np.ndarray  # float64 [N] added to the end token's log-prob
    word_potential: np.ndarray  # float64 [N, P] cosine × normalisation a candidate's continuation carries
    rest_potential: np.ndarray  # float64 [N] the same for the row's other continuations


def guide_bonus(
    word_cosine: np.ndarray,
    prefix_cosine: np.ndarray,
    potential: np.ndarray,
    weight: float,
    now: float = 1.0,
    after: float = 1.0,
) -> GuideBonus:
    """Potential-based shaping of one step by the ranker's cosine, such that a finished caption's
    normalised score is its normalised log-prob + ``weight`` × its cosine (BUTR+RR's re-ranking
    criterion with ``weight`` = 1 / ``rerank_weight``).

    ``now`` / ``after``: the search's length normalisation of the rows' captions so far and of their
    continuations (``words ** length_penalty``: t and t + 1 words). Every beam's cumulative score holds
    log-prob + ``weight`` × ``potential`` [N], the cosine of its partial caption as it was last
    re-scored times that caption's normalisation (0 before the first re-scoring). A candidate word of
    cosine ``word_cosine`` [N, P] (NaN in an empty slot) gets ``weight × (cosine × after − potential)``:
    its cumulative score becomes log-prob + ``weight`` × its own cosine × ``after``; every other word of
    the row gets the row's smallest candidate cosine instead (so it never overtakes a re-scored word of
    higher log-prob); the end token gets ``weight × (prefix_cosine × now − potential)``, 0 where
    ``prefix_cosine`` [N] is NaN, so that the finished caption, divided by ``now``, scores its normalised
    log-prob + ``weight`` × its whole text's cosine. P may be 0 (a step that re-scores only the end).
    Returns ``GuideBonus`` (its potentials in the same units). ``weight = 0`` adds exactly 0. Pure."""
    word_cosine = np.asarray(word_cosine, dtype=np.float64)
    potential = np.asarray(potential, dtype=np.float64)
    prefix_cosine = np.asarray(prefix_cosine, dtype=np.float64)
    n = potential.shape[0]
    if word_cosine.ndim != 2 or word_cosine.shape[0] != n or prefix_cosine.shape != (n,):
        raise ValueError(
            f"word_cosine must be [N, P] and prefix_cosine [N] for N={n}, got "
            f"{list(word_cosine.shape)}, {list(prefix_cosine.shape)}"
        )
    above(0, now=now, after=after)
    scored = ~np.isnan(word_cosine)
    any_scored = scored.any(axis=1)
    lowest = np.where(scored, word_cosine, np.inf).min(axis=1) if word_cosine.shape[1] else np.full(n, np.inf)
    rest_potential = np.where(any_scored, lowest * after, potential)
    word_potential = np.where(scored, word_cosine * after, rest_potential[:, None])
    eos = np.where(np.isnan(prefix_cosine), 0.0, weight * (prefix_cosine * now - potential))
    return GuideBonus(
        words=weight * (word_potential - potential[:, None]),
        rest=weight * (rest_potential - potential),
        eos=eos,
        word_potential=word_potential,
        rest_potential=rest_potential,
    )


def apply_guide(logprobs: np.ndarray, words: np.ndarray, bonus: GuideBonus, eos: int) -> np.ndarray:
    """``logprobs`` [N, V] with ``bonus`` added: ``bonus.rest`` to every word, ``bonus.words`` to the
    candidate ``words`` [N, P] (-1: an empty slot) instead, ``bonus.eos`` to the end token. A new array
    of the input's dtype; ``-inf`` stays ``-inf``. Pure."""
    out = np.array(logprobs)
    n = out.shape[0]
    add = np.repeat(bonus.rest[:, None], out.shape[1], axis=1)
    rows, cols = np.nonzero(words >= 0)
    add[rows, words[rows, cols]] = bonus.words[rows, cols]
    add[np.arange(n), eos] = bonus.eos
    out += add.astype(out.dtype)
    return out


def cosines(text: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Row-wise dot products of L2-normalised embeddings: ``text`` [C, J], ``image`` [C, J] → [C]. Pure."""
    return np.einsum("cj,cj->c", np.asarray(text, np.float64), np.asarray(image, np.float64))


__all__ = [
    "MAX_GUIDE_POOL",
    "MAX_GUIDE_WEIGHT",
    "NEG_INF",
    "BanWords",
    "ForceWords",
    "GuideBonus",
    "LogitsProcessor",
    "NoRepeatNgram",
    "RankerGuide",
    "SynonymSubstitution",
    "apply_guide",
    "cosines",
    "guide_bonus",
    "guide_candidates",
]
