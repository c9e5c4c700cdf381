"""Per-request logits processors (the HF ``LogitsProcessor`` shape) and the registry that resolves a
request's JSON ``hooks`` into search parameters.

A processor is ``proc(tokens: int64 [N, T], logprobs: float32 [N, V]) -> float32 [N, V]``: ``tokens``
are the rows' prefixes ``BOS w1..wt`` (``T = t + 1``, no padding: all rows of one request have ``t``
words), ``logprobs`` the next-word log-probs of the same rows. A processor returns a new array and
never modifies its inputs; it works on token ids only. ``BeamBatch.advance`` applies a request's
processors, in order, to that request's live rows only, between two passes of the search's hard
constraints (banned ids, no EOS before ``min_length`` words, only EOS at ``max_length``).

Processors (one small class each; a bad argument raises ``ValueError`` naming it):

* ``BanWords(ids)`` — the words never appear.
* ``NoRepeatNgram(n)`` — no n-gram twice in a caption (``n=2`` also stops seed 003's "dog dog dog").
* ``SynonymSubstitution(pairs)`` — seed 001 §4.3: per row, when the argmax word is in S1 its S2
  synonym gets log-prob 0 and every other word ``-inf``. Which pairs to use (the substitutivity word
  tables) is decided outside the engine (``service.probes.substitution``).

JSON hooks → ``ResolvedHooks`` (``resolve_hooks(specs, vocab)``): ``ban_words`` (``words`` and/or
``ids``), ``no_repeat_ngram`` (``n``) and ``synonym_substitution`` (``pairs``: ``[[from, to], ...]`` or
``{from: to}``, vocabulary words) become processors; ``min_length`` (``min_words``) and
``diverse_beam`` (``groups``, [``diversity_penalty``, 0.5]) are search parameters that the JSON API
keeps accepting as hooks. A bad spec raises ``HookError`` whose ``loc`` is where in the request body
(``("hooks", 0, "params", "n")``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from service.text.vocabulary import SPECIALS, Vocabulary

NEG_INF = -np.inf
MAX_HOOKS = 16
MAX_WORDS = 1000  # words / ids / pairs per hook
DEFAULT_DIVERSITY_PENALTY = 0.5


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


class HookError(ValueError):
    """A hook spec the engine cannot run: ``hook`` its name as given, ``param`` the offending parameter
    (``None`` for the spec itself), ``index`` its position in the request's list."""

    def __init__(self, hook: str, param: str | None, message: str, index: int | None = None) -> None:
        self.hook, self.param, self.message, self.index = hook, param, message, index
        where = f"hook {hook!r}" + (f" param {param!r}" if param is not None else "")
        super().__init__(f"{where}: {message}")

    @property
    def loc(self) -> tuple[str | int, ...]:
        """``("hooks", i, "params", param)``, ``("hooks", i, "name")`` for the spec itself, or
        ``("hooks",)`` for the list as a whole."""
        if self.index is None and self.param is None:
            return ("hooks",)
        head: tuple[str | int, ...] = ("hooks",) if self.index is None else ("hooks", self.index)
        return (*head, "params", self.param) if self.param is not None else (*head, "name")


@dataclass
class ResolvedHooks:
    """What a request's hooks ask of its search."""

    processors: list[LogitsProcessor] = field(default_factory=list)  # applied in this order
    names: list[str] = field(default_factory=list)  # as given, in order
    min_words: int = 0  # largest min_length hook
    min_words_index: int | None = None
    groups: int = 1
    diversity_penalty: float = 0.0
    diverse_index: int | None = None

    def check(self, beam_size: int, max_length: int) -> None:
        """Validate against the request's beam size and length; raises ``HookError``."""
        if self.diverse_index is not None and (self.groups > beam_size or beam_size % self.groups):
            raise HookError(
                "diverse_beam", "groups", f"must divide the beam size {beam_size}", self.diverse_index
            )
        if self.min_words > max_length:
            raise HookError(
                "min_length", "min_words", f"must be <= max_length {max_length}", self.min_words_index
            )

    @property
    def ordered_names(self) -> tuple[str, ...]:
        """Hook names in request order, ``diverse_beam`` (a search option) last."""
        rest = [n for n in self.names if n != "diverse_beam"]
        return (*rest, *(["diverse_beam"] if self.diverse_index is not None else []))


class _Params:
    """Typed access to one spec's params; every problem raises ``HookError`` naming the param."""

    def __init__(self, hook: str, index: int, raw: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
        self.hook, self.index, self.raw = hook, index, raw
        for key in raw:
            if key not in allowed:
                raise self.error(str(key), f"unknown parameter (known: {', '.join(allowed) or 'none'})")

    def error(self, param: str | None, message: str) -> HookError:
        return HookError(self.hook, param, message, self.index)

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def integer(self, key: str, minimum: int) -> int:
        if not self.has(key):
            raise self.error(key, "required")
        value = self.raw[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return int(value)

    def number(self, key: str, default: float, minimum: float) -> float:
        if not self.has(key):
            return default
        value = self.raw[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return float(value)

    def items(self, key: str) -> list[Any]:
        value = self.raw.get(key)
        if value is None:
            return []
        if isinstance(value, Mapping):
            value = list(value.items())
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise self.error(key, f"must be a list, got {value!r}")
        if len(value) > MAX_WORDS:
            raise self.error(key, f"at most {MAX_WORDS} entries, got {len(value)}")
        return list(value)

    def word(self, key: str, value: Any, vocab: Vocabulary) -> int:
        """The id of a vocabulary word (not a special token)."""
        if not isinstance(value, str):
            raise self.error(key, f"words must be strings, got {value!r}")
        word = value.strip().lower()
        if word in SPECIALS:
            raise self.error(key, f"{value!r} is a special token, not a word")
        if word not in vocab.index:
            raise self.error(key, f"unknown word {value!r} (not in the model's vocabulary)")
        return vocab.index[word]

    def word_id(self, key: str, value: Any, vocab: Vocabulary) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"ids must be integers, got {value!r}")
        if not len(SPECIALS) <= value < len(vocab):
            raise self.error(key, f"id {value} is not a word id (must be in [{len(SPECIALS)}, {len(vocab)}))")
        return int(value)

    def processor(self, param: str, make: Callable[[], LogitsProcessor]) -> LogitsProcessor:
        """Build a processor, reporting its ``ValueError`` as a ``HookError`` on ``param``."""
        try:
            return make()
        except ValueError as exc:
            raise self.error(param, str(exc)) from exc


def _ban_words(p: _Params, vocab: Vocabulary, out: ResolvedHooks) -> None:
    ids = [p.word("words", w, vocab) for w in p.items("words")]
    ids += [p.word_id("ids", i, vocab) for i in p.items("ids")]
    if not ids:
        raise p.error("words", "required: at least one word (or id) to ban")
    out.processors.append(p.processor("words", lambda: BanWords(ids)))


def _no_repeat_ngram(p: _Params, vocab: Vocabulary, out: ResolvedHooks) -> None:
    n = p.integer("n", 1)
    out.processors.append(p.processor("n", lambda: NoRepeatNgram(n)))


def _min_length(p: _Params, vocab: Vocabulary, out: ResolvedHooks) -> None:
    min_words = p.integer("min_words", 0)
    if min_words > out.min_words or out.min_words_index is None:
        out.min_words, out.min_words_index = max(out.min_words, min_words), p.index


def _synonym_substitution(p: _Params, vocab: Vocabulary, out: ResolvedHooks) -> None:
    entries = p.items("pairs")
    if not entries:
        raise p.error("pairs", "required: [[from, to], ...] vocabulary words")
    pairs: list[tuple[int, int]] = []
    for entry in entries:
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise p.error("pairs", f"each pair must be [from, to], got {entry!r}")
        pairs.append((p.word("pairs", entry[0], vocab), p.word("pairs", entry[1], vocab)))
    out.processors.append(p.processor("pairs", lambda: SynonymSubstitution(pairs)))


def _diverse_beam(p: _Params, vocab: Vocabulary, out: ResolvedHooks) -> None:
    out.groups = p.integer("groups", 1)
    out.diversity_penalty = p.number("diversity_penalty", DEFAULT_DIVERSITY_PENALTY, 0.0)
    out.diverse_index = p.index


@dataclass(frozen=True)
class HookType:
    """A registry entry: ``params`` maps each parameter to a one-line description."""

    name: str
    description: str
    params: Mapping[str, str]
    build: Callable[[_Params, Vocabulary, ResolvedHooks], None]
    repeatable: bool = True


HOOKS: dict[str, HookType] = {
    h.name: h
    for h in (
        HookType(
            "ban_words",
            "never emit these words",
            {"words": "list of vocabulary words", "ids": "list of word ids"},
            _ban_words,
        ),
        HookType(
            "no_repeat_ngram",
            "no n-gram twice in a caption",
            {"n": "n-gram size, >= 1 (2 stops 'dog dog dog')"},
            _no_repeat_ngram,
        ),
        HookType(
            "min_length",
            "no end of caption before min_words words",
            {"min_words": "integer >= 0, <= max_length"},
            _min_length,
        ),
        HookType(
            "synonym_substitution",
            "seed 001 substitutivity: when the most likely word is in S1, emit its S2 synonym instead",
            {"pairs": "[[from, to], ...] or {from: to}, vocabulary words"},
            _synonym_substitution,
            repeatable=False,
        ),
        HookType(
            "diverse_beam",
            "diverse beam search (Vijayakumar et al. 2018, Hamming diversity)",
            {
                "groups": "number of beam groups, >= 1, divides the beam size",
                "diversity_penalty": f">= 0, per earlier group's pick (default {DEFAULT_DIVERSITY_PENALTY})",
            },
            _diverse_beam,
            repeatable=False,
        ),
    )
}


def hook_catalog() -> list[dict[str, Any]]:
    """The registry as JSON-able data (name, description, params) for documentation endpoints."""
    return [{"name": h.name, "description": h.description, "params": dict(h.params)} for h in HOOKS.values()]


def spec_parts(spec: Any, index: int) -> tuple[str, Mapping[str, Any]]:
    """``(name, params)`` of a dict spec or a pydantic-like object with ``name`` / ``params``."""
    if hasattr(spec, "model_dump"):
        spec = spec.model_dump()
    if not isinstance(spec, Mapping):
        raise HookError(str(spec), None, "a hook must be an object {name, params}", index)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise HookError(str(name), None, "missing or invalid hook name", index)
    extra = set(spec) - {"name", "params"}
    if extra:
        raise HookError(name, None, f"unknown keys {sorted(extra)} (a hook is {{name, params}})", index)
    params = spec.get("params")
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise HookError(name, None, f"params must be an object, got {params!r}", index)
    return name, params


def resolve_hooks(specs: Sequence[Any] | None, vocab: Vocabulary) -> ResolvedHooks:
    """Validate ``specs`` (dicts or pydantic models with ``name`` and ``params``) and resolve them;
    raises ``HookError`` on the first bad spec."""
    out = ResolvedHooks()
    specs = list(specs or [])
    if len(specs) > MAX_HOOKS:
        raise HookError("hooks", None, f"at most {MAX_HOOKS} hooks per request, got {len(specs)}")
    for index, spec in enumerate(specs):
        name, raw = spec_parts(spec, index)
        kind = HOOKS.get(name)
        if kind is None:
            raise HookError(name, None, f"unknown hook (known: {', '.join(HOOKS)})", index)
        if not kind.repeatable and name in out.names:
            raise HookError(name, None, "may be given only once", index)
        kind.build(_Params(name, index, raw, kind.params), vocab, out)
        out.names.append(name)
    return out
