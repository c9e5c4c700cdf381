"""Per-request decoding hooks: small logits processors in the HF ``LogitsProcessor`` shape, a registry
that builds them from JSON, and the ``HookPlan`` the engine runs a request's searches with.

A hook is ``hook(tokens: int64 [N, T], logprobs: float32 [N, V]) -> float32 [N, V]``: ``tokens`` are the
rows' prefixes ``BOS w1..wt`` (``T = t + 1``, no padding: all rows of one search have ``t`` words),
``logprobs`` the next-word log-probs of the same rows. A hook returns a new array and never modifies
its inputs; it is vectorised over the ``N`` rows. ``BeamSearch.advance`` applies a request's hooks to
that request's live rows only (between two passes of the search's hard constraints, see
``service.engine.beam``), so hooks of concurrent requests sharing one model call never mix.

Processors (one small class each; bad arguments raise ``ValueError`` naming the argument):

* ``BanWords(ids)`` — the words never appear (log-prob ``-inf``).
* ``NoRepeatNgram(n)`` — no n-gram occurs twice in a caption (``n=2`` also stops "dog dog dog", the
  duplicated-word captions of seed 003).
* ``MinLength(min_words, eos_id)`` — no EOS before ``min_words`` words.
* ``SynonymSubstitution(pairs)`` — seed 001 §4.3: "for each active hypothesis, if the current most
  likely word belongs in S1, we substitute the word with its synonym from S2 ... we set the probability
  of the synonym word to 1": per row, when the argmax word is in S1 its synonym gets log-prob 0 and
  every other word ``-inf``.

JSON → plan (what the API and the engine call)::

    plan = build_hooks(request.hooks, vocab)      # list of {"name": ..., "params": {...}}
    plan.check(beam_size=k, max_length=max_len)   # needs the request's beam size
    # both raise HookError(hook, param, message): the API answers 422 at HookError.loc
    search = BeamSearch(..., **plan.search_kwargs())               # caption S (or the only caption)
    if plan.return_original:                                        # synonym_substitution asked for O
        original = BeamSearch(..., **plan.search_kwargs(substitute=False))
    plan.counts                                    # Counter: hook name -> applications so far

``search_kwargs`` gives ``logits_hook`` (the processors composed in request order, or ``None`` for a
plan without any, which leaves the search exactly as without hooks), ``groups`` and
``diversity_penalty``. ``diverse_beam`` is not a logits processor but a search option (diverse beam
search, Vijayakumar et al. 2018, see ``service.engine.beam``). ``substitute=False`` leaves
``synonym_substitution`` out (the original caption O of seed 001 Table 6); if
``plan.substitutions == 0`` once the S search has finished, no row was ever substituted and O == S.

Registry (``HOOKS``, ``hook_catalog()`` lists it), parameters in brackets are optional:

* ``ban_words``: ``words`` (vocabulary words) and/or ``ids`` (word ids); at least one word.
* ``no_repeat_ngram``: ``n`` >= 1.
* ``min_length``: ``min_words`` >= 0 (at most the request's ``max_length``: checked by ``plan.check``).
* ``synonym_substitution``: [``pairs``: ``[[from, to], ...]`` or ``{from: to}``, vocabulary words;
  default the substitutivity table of ``service.text.synonyms`` restricted to the vocabulary, singular
  and plural], [``direction``: ``to_category`` (default; the seed's fine-grained word → category,
  "puppy" → "dog") or ``to_fine`` ("dog" → "puppy"); only without ``pairs``], [``return_original``:
  bool, default true: also return the original caption O, from a second search without this hook].
* ``diverse_beam``: ``groups`` >= 1, dividing the beam size (``plan.check``), [``diversity_penalty``
  >= 0, default 0.5].

``ban_words``, ``no_repeat_ngram`` and ``min_length`` may be given more than once (each is applied);
``synonym_substitution`` and ``diverse_beam`` at most once. At most ``MAX_HOOKS`` hooks per request.

Counting: one *application* of a hook is one call of the plan's composed hook on the live rows of one
search at one decoding step — one batch of rows of one request, however many images and beams it
holds. Every hook of the plan counts one application per such call (``diverse_beam`` included: it
shapes that step's selection), into ``plan.counts[name]`` and, if given, ``on_apply(name, n_rows)``
(e.g. a Prometheus counter ``compcap_hook_applications_total{hook=name}``). A request with
``return_original`` runs two searches and so counts the steps of both, except that the O search
does not count ``synonym_substitution``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from service.text.concepts import ConceptInventory, load_concepts
from service.text.synonyms import DIRECTIONS, substitution_pairs
from service.text.vocabulary import SPECIALS, Vocabulary

NEG_INF = -np.inf
MAX_HOOKS = 16
MAX_WORDS = 1000  # words / ids / pairs per hook
DEFAULT_DIVERSITY_PENALTY = 0.5

OnApply = Callable[[str, int], Any]


@runtime_checkable
class LogitsHook(Protocol):
    """``hook(tokens int64 [N, T], logprobs float [N, V]) -> float [N, V]`` (a new array)."""

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray: ...


def _int_arg(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


# -------------------------------------------------------------------------------------------- processors
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


class MinLength:
    """No EOS (``eos_id``) while a row has fewer than ``min_words`` words (``T - 1``, BOS excluded)."""

    def __init__(self, min_words: int, eos_id: int) -> None:
        self.min_words = _int_arg("min_words", min_words, 0)
        self.eos_id = _int_arg("eos_id", eos_id, 0)

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        out = np.array(logprobs)
        if tokens.shape[1] - 1 < self.min_words:
            out[:, self.eos_id] = NEG_INF
        return out


class SynonymSubstitution:
    """Seed 001 §4.3: per row, if the most likely next word is in S1 (a key of ``pairs``), put all the
    probability on its S2 synonym: log-prob 0 for the synonym, ``-inf`` for every other word. Ties go
    to the lowest word id. ``substitutions`` counts the rows substituted so far."""

    def __init__(self, pairs: Mapping[int, int] | Sequence[tuple[int, int]]) -> None:
        items = list(pairs.items()) if isinstance(pairs, Mapping) else [tuple(p) for p in pairs]
        if not items:
            raise ValueError("pairs must not be empty")
        table: dict[int, int] = {}
        for item in items:
            if len(item) != 2:
                raise ValueError(f"pairs must be (S1 id, S2 id) pairs, got {item!r}")
            src = _int_arg("pairs", item[0], 0)
            dst = _int_arg("pairs", item[1], 0)
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


class HookChain:
    """The hooks of a plan composed in order; each call counts one application for every name in
    ``counted`` (see the module docstring)."""

    def __init__(
        self,
        hooks: Sequence[tuple[str, LogitsHook]],
        counted: Sequence[str],
        counts: Counter[str],
        on_apply: OnApply | None = None,
    ) -> None:
        self.hooks = tuple(hooks)
        self.counted = tuple(counted)
        self.counts = counts
        self.on_apply = on_apply

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        for _, hook in self.hooks:
            logprobs = hook(tokens, logprobs)
        n_rows = int(logprobs.shape[0])
        for name in self.counted:
            self.counts[name] += 1
            if self.on_apply is not None:
                self.on_apply(name, n_rows)
        return logprobs


# -------------------------------------------------------------------------------------------- errors
class HookError(ValueError):
    """A hook spec the engine cannot run. ``hook``: its name as given; ``param``: the offending
    parameter (``None`` for the spec itself, e.g. an unknown hook name); ``index``: its position in
    the request's list (``None`` when unknown)."""

    def __init__(self, hook: str, param: str | None, message: str, index: int | None = None) -> None:
        self.hook, self.param, self.message, self.index = hook, param, message, index
        where = f"hook {hook!r}" + (f" param {param!r}" if param is not None else "")
        super().__init__(f"{where}: {message}")

    @property
    def loc(self) -> tuple[str | int, ...]:
        """Where in the request body: ``("hooks", i, "params", param)``, ``("hooks", i, "name")`` for the
        spec itself, ``("hooks",)`` for the list as a whole (too many hooks)."""
        if self.index is None and self.param is None:
            return ("hooks",)
        head: tuple[str | int, ...] = ("hooks",) if self.index is None else ("hooks", self.index)
        return (*head, "params", self.param) if self.param is not None else (*head, "name")


# -------------------------------------------------------------------------------------------- plan
@dataclass
class HookPlan:
    """What one request's hooks ask of its searches (see module docstring)."""

    processors: list[tuple[str, LogitsHook]] = field(default_factory=list)  # applied in this order
    groups: int = 1
    diversity_penalty: float = 0.0
    diverse: bool = False  # a diverse_beam hook was given
    return_original: bool = False  # synonym_substitution with return_original
    min_words: int = 0  # largest min_length hook
    min_words_index: int | None = None  # its position in the request's hooks
    diverse_index: int | None = None  # position of the diverse_beam hook
    counts: Counter[str] = field(default_factory=Counter)
    on_apply: OnApply | None = None

    @property
    def names(self) -> list[str]:
        """Hook names in request order (``diverse_beam`` last)."""
        return [name for name, _ in self.processors] + (["diverse_beam"] if self.diverse else [])

    @property
    def substitution(self) -> SynonymSubstitution | None:
        for _, hook in self.processors:
            if isinstance(hook, SynonymSubstitution):
                return hook
        return None

    @property
    def substitutions(self) -> int:
        """Rows substituted so far by ``synonym_substitution`` (0 without one)."""
        sub = self.substitution
        return 0 if sub is None else sub.substitutions

    def check(self, beam_size: int, max_length: int | None = None) -> None:
        """Validate the plan against the request's search settings; raises ``HookError``."""
        if self.diverse and (self.groups > beam_size or beam_size % self.groups):
            raise HookError(
                "diverse_beam", "groups", f"must divide the beam size {beam_size}", self.diverse_index
            )
        if max_length is not None and self.min_words > max_length:
            raise HookError(
                "min_length", "min_words", f"must be <= max_length {max_length}", self.min_words_index
            )

    def logits_hook(self, substitute: bool = True) -> HookChain | None:
        """The composed hook for ``BeamSearch(logits_hook=...)``; ``None`` when there is nothing to do.
        ``substitute=False`` leaves out ``synonym_substitution`` (the original caption's search)."""
        hooks = [(n, h) for n, h in self.processors if substitute or n != "synonym_substitution"]
        counted = [n for n, _ in hooks] + (["diverse_beam"] if self.diverse else [])
        if not counted:
            return None
        return HookChain(hooks, counted, self.counts, self.on_apply)

    def search_kwargs(self, substitute: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``BeamSearch`` / ``beam_search_async``."""
        return {
            "logits_hook": self.logits_hook(substitute),
            "groups": self.groups,
            "diversity_penalty": self.diversity_penalty,
        }


# -------------------------------------------------------------------------------------------- registry
class _Params:
    """Typed access to one spec's params; every problem raises ``HookError`` naming the param."""

    def __init__(self, hook: str, index: int, raw: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
        self.hook, self.index, self.raw = hook, index, raw
        for key in raw:
            if key not in allowed:
                known = ", ".join(allowed) or "none"
                raise self.error(str(key), f"unknown parameter (known: {known})")

    def error(self, param: str | None, message: str) -> HookError:
        return HookError(self.hook, param, message, self.index)

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def get(self, key: str, required: bool) -> Any:
        if not self.has(key):
            if required:
                raise self.error(key, "required")
            return None
        return self.raw[key]

    def integer(self, key: str, minimum: int) -> int:
        value = self.get(key, required=True)
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

    def boolean(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.raw[key]
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: Sequence[str], default: str) -> str:
        if not self.has(key):
            return default
        value = self.raw[key]
        if value not in choices:
            raise self.error(key, f"must be one of {list(choices)}, got {value!r}")
        return str(value)

    def items(self, key: str) -> list[Any]:
        value = self.get(key, required=False)
        if value is None:
            return []
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


@dataclass(frozen=True)
class _Context:
    vocab: Vocabulary
    concepts: ConceptInventory | None


@dataclass(frozen=True)
class HookType:
    """A registry entry: ``params`` maps each parameter to a one-line description; ``build`` turns
    validated params into a change of the plan."""

    name: str
    description: str
    params: Mapping[str, str]
    build: Callable[[_Params, _Context, HookPlan], None]
    repeatable: bool = True


def _checked(p: _Params, param: str, make: Callable[[], LogitsHook]) -> LogitsHook:
    """Build a processor, reporting its ``ValueError`` as a ``HookError`` on ``param``."""
    try:
        return make()
    except ValueError as exc:
        raise p.error(param, str(exc)) from exc


def _build_ban_words(p: _Params, ctx: _Context, plan: HookPlan) -> None:
    ids = [p.word("words", w, ctx.vocab) for w in p.items("words")]
    ids += [p.word_id("ids", i, ctx.vocab) for i in p.items("ids")]
    if not ids:
        raise p.error("words", "required: at least one word (or id) to ban")
    plan.processors.append((p.hook, _checked(p, "words", lambda: BanWords(ids))))


def _build_no_repeat_ngram(p: _Params, ctx: _Context, plan: HookPlan) -> None:
    n = p.integer("n", 1)
    plan.processors.append((p.hook, _checked(p, "n", lambda: NoRepeatNgram(n))))


def _build_min_length(p: _Params, ctx: _Context, plan: HookPlan) -> None:
    min_words = p.integer("min_words", 0)
    plan.processors.append((p.hook, _checked(p, "min_words", lambda: MinLength(min_words, ctx.vocab.eos_id))))
    if min_words > plan.min_words or plan.min_words_index is None:
        plan.min_words, plan.min_words_index = max(plan.min_words, min_words), p.index


def _build_synonym_substitution(p: _Params, ctx: _Context, plan: HookPlan) -> None:
    direction = p.choice("direction", DIRECTIONS, "to_category")
    raw = p.get("pairs", required=False)
    if raw is not None:
        if p.has("direction"):
            raise p.error("direction", "applies to the default table only, not with pairs")
        entries = list(raw.items()) if isinstance(raw, Mapping) else p.items("pairs")
        if len(entries) > MAX_WORDS:
            raise p.error("pairs", f"at most {MAX_WORDS} entries, got {len(entries)}")
        if not entries:
            raise p.error("pairs", "must not be empty")
        pairs: list[tuple[int, int]] = []
        for entry in entries:
            if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
                raise p.error("pairs", f"each pair must be [from, to], got {entry!r}")
            pairs.append((p.word("pairs", entry[0], ctx.vocab), p.word("pairs", entry[1], ctx.vocab)))
    else:
        concepts = ctx.concepts if ctx.concepts is not None else load_concepts()
        words = substitution_pairs(concepts, direction, words=ctx.vocab.index)
        pairs = [(ctx.vocab.index[a], ctx.vocab.index[b]) for a, b in words]
        if not pairs:
            raise p.error("pairs", "no pair of the default synonym table is in the model's vocabulary")
    plan.processors.append((p.hook, _checked(p, "pairs", lambda: SynonymSubstitution(pairs))))
    plan.return_original = p.boolean("return_original", True)


def _build_diverse_beam(p: _Params, ctx: _Context, plan: HookPlan) -> None:
    plan.groups = p.integer("groups", 1)
    plan.diversity_penalty = p.number("diversity_penalty", DEFAULT_DIVERSITY_PENALTY, 0.0)
    plan.diverse = True
    plan.diverse_index = p.index


HOOKS: dict[str, HookType] = {
    h.name: h
    for h in (
        HookType(
            "ban_words",
            "never emit these words",
            {"words": "list of vocabulary words", "ids": "list of word ids"},
            _build_ban_words,
        ),
        HookType(
            "no_repeat_ngram",
            "no n-gram twice in a caption",
            {"n": "n-gram size, >= 1 (2 stops 'dog dog dog')"},
            _build_no_repeat_ngram,
        ),
        HookType(
            "min_length",
            "no end of caption before min_words words",
            {"min_words": "integer >= 0, <= max_length"},
            _build_min_length,
        ),
        HookType(
            "synonym_substitution",
            "seed 001 substitutivity: when the most likely word is in S1, emit its S2 synonym instead",
            {
                "pairs": "[[from, to], ...] or {from: to} (default: the substitutivity synonym table)",
                "direction": "default table only: to_category (default, 'puppy'->'dog') or to_fine",
                "return_original": "bool, default true: also return the caption without substitution",
            },
            _build_synonym_substitution,
            repeatable=False,
        ),
        HookType(
            "diverse_beam",
            "diverse beam search (Vijayakumar et al. 2018, Hamming diversity)",
            {
                "groups": "number of beam groups, >= 1, divides the beam size",
                "diversity_penalty": f">= 0, per earlier group's pick (default {DEFAULT_DIVERSITY_PENALTY})",
            },
            _build_diverse_beam,
            repeatable=False,
        ),
    )
}


def hook_catalog() -> list[dict[str, Any]]:
    """The registry as JSON-able data (name, description, params) for documentation endpoints."""
    return [{"name": h.name, "description": h.description, "params": dict(h.params)} for h in HOOKS.values()]


def _spec_parts(spec: Any, index: int) -> tuple[str, Mapping[str, Any]]:
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


def build_hooks(
    specs: Sequence[Any] | None,
    vocab: Vocabulary,
    *,
    concepts: ConceptInventory | None = None,
    on_apply: OnApply | None = None,
) -> HookPlan:
    """Validate ``specs`` (dicts or pydantic models with ``name`` and ``params``) and build their
    ``HookPlan``; raises ``HookError`` on the first bad spec. ``concepts``: the inventory for the
    default synonym table (default: the packaged one). ``on_apply(name, n_rows)`` is called for each
    application (see module docstring)."""
    plan = HookPlan(on_apply=on_apply)
    specs = list(specs or [])
    if len(specs) > MAX_HOOKS:
        raise HookError("hooks", None, f"at most {MAX_HOOKS} hooks per request, got {len(specs)}")
    ctx = _Context(vocab, concepts)
    seen: set[str] = set()
    for index, spec in enumerate(specs):
        name, raw = _spec_parts(spec, index)
        kind = HOOKS.get(name)
        if kind is None:
            raise HookError(name, None, f"unknown hook (known: {', '.join(HOOKS)})", index)
        if not kind.repeatable and name in seen:
            raise HookError(name, None, "may be given only once", index)
        seen.add(name)
        kind.build(_Params(name, index, raw, kind.params), ctx, plan)
    return plan
