"""The hook registry: what a request's JSON ``hooks`` (``[{"name": ..., "params": {...}}]``) may ask
for, and how each spec becomes logits processors (``service.engine.processors``, the maths) or search
parameters.

A hook is one registered record (``@hook(name, description, params)`` on the function that validates
its params and builds what it asks for); ``HOOKS`` holds them in registration order, which is the order
``hook_catalog`` (``GET /v1/hooks``) lists them in. Adding a hook is one record here (and its processor
class in ``processors.py`` when it needs new maths), plus its test.

``resolve_hooks(specs, vocab)`` validates a request's specs into ``ResolvedHooks``: ``ban_words``
(``words`` and/or ``ids``), ``no_repeat_ngram`` (``n``) and ``synonym_substitution`` (``pairs``:
``[[from, to], ...]`` or ``{from: to}``, vocabulary words, or the default synonym table of
``service.text.synonyms`` in ``direction``, restricted to the vocabulary) become processors;
on a subword captioner a word is its token sequence as it follows a space: the hook fires where the
argmax token is an S1 word's first token (it cannot look ahead: "▁do" may start "dog" or "door"), forces
its S2 word's first token, then S2's other tokens one per step (``SynonymSubstitution``); two S1 words
of a request that start with the same token are refused, and the default table keeps the first pair
of such words and every other pair whose words the tokenizer writes without its unknown token;
``synonym_substitution``'s ``return_original`` (default true) sets ``compare_without``: the caller may
decode the same request without that hook too (the gateway returns it as the original caption); ``min_length``
(``min_words``) and ``diverse_beam`` (``groups``, [``diversity_penalty``, 0.5]) are search parameters
that the JSON API keeps accepting as hooks; ``ranker_guided`` (``every``, ``weight``, ``pool``, ``ranker``)
sets ``guide`` (a ``RankerGuide``: the scheduler calls the ranker during the search,
``service.engine.guide``), its cost bounded by ``beam_size × (pool + 1) <= MAX_GUIDE_TEXTS`` and its
ranker resolved against the manifest by ``resolve_params``. A bad spec raises ``HookError`` whose
``loc`` is where in the request body (``("hooks", 0, "params", "n")``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.engine.processors import (
    MAX_GUIDE_POOL,
    MAX_GUIDE_WEIGHT,
    BanSequences,
    BanWords,
    ForceWords,
    LogitsProcessor,
    NoRepeatNgram,
    RankerGuide,
    SynonymSubstitution,
)
from service.text.concepts import load_concepts
from service.text.subword import SubwordVocabulary, TokenVocabulary
from service.text.suggest import did_you_mean
from service.text.synonyms import (
    DIRECTIONS,
    distinct_first_tokens,
    substitution_pairs,
    vocabulary_words,
)
from service.text.vocabulary import SPECIALS

MAX_HOOKS = 16  # hooks in one request
MAX_WORDS = 1000  # words / ids / pairs per hook
DEFAULT_DIVERSITY_PENALTY = 0.5
DEFAULT_GUIDE_EVERY, DEFAULT_GUIDE_WEIGHT, DEFAULT_GUIDE_POOL = 2, 2.0, 5  # ranker_guided: the study's choice
MAX_GUIDE_TEXTS = 2048  # ranker_guided: beam_size × (pool + 1), the partial captions per image per call
GUIDE_EXCLUDES = ("synonym_substitution", "force_words")  # they force words the ranker did not score


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
    compare_without: int | None = None  # a hook asking for the captions without it too (its index)
    guide: RankerGuide | None = None  # ranker_guided
    guide_index: int | None = None

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
        if self.guide is not None:
            texts = beam_size * (self.guide.pool + 1)
            if texts > MAX_GUIDE_TEXTS:
                raise HookError(
                    "ranker_guided",
                    "pool",
                    f"beam_size × (pool + 1) = {beam_size} × {self.guide.pool + 1} = {texts} partial "
                    f"captions per image per ranker call; at most {MAX_GUIDE_TEXTS}",
                    self.guide_index,
                )
            clash = [n for n in GUIDE_EXCLUDES if n in self.names]
            if clash:
                raise HookError(
                    "ranker_guided",
                    None,
                    f"cannot be combined with {clash[0]} (it forces words the ranker did not score)",
                    self.guide_index,
                )

    @property
    def ordered_names(self) -> tuple[str, ...]:
        """Hook names in request order, ``diverse_beam`` (a search option) last."""
        rest = [n for n in self.names if n != "diverse_beam"]
        return (*rest, *(["diverse_beam"] if self.diverse_index is not None else []))


class HookParams:
    """Typed access to one spec's params; every problem raises ``HookError`` naming the param."""

    def __init__(self, hook: str, index: int, raw: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
        self.hook, self.index, self.raw = hook, index, raw
        for key in raw:
            if key not in allowed:
                raise self.error(
                    str(key),
                    f"unknown parameter{did_you_mean(key, allowed)} (known: {', '.join(allowed) or 'none'})",
                )

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

    def word(self, key: str, value: Any, vocab: TokenVocabulary) -> int:
        """The id of a word of a word-level vocabulary (not a special token)."""
        if not isinstance(value, str):
            raise self.error(key, f"words must be strings, got {value!r}")
        word = value.strip().lower()
        if word in SPECIALS:
            raise self.error(key, f"{value!r} is a special token, not a word")
        if word not in vocab.index:
            raise self.error(key, f"unknown word {value!r} (not in the model's vocabulary)")
        return vocab.index[word]

    def spaced_word(self, key: str, value: Any, vocab: SubwordVocabulary) -> tuple[int, ...]:
        """A word's tokens in a subword vocabulary as it follows a space (``word_sequences(w)[0]``),
        refused when the tokenizer writes it with its unknown token."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"words must be non-empty strings, got {value!r}")
        spaced = vocab.word_sequences(value.strip())[:1]
        if not spaced or vocab.unknown_id in spaced[0]:
            raise self.error(key, f"{value!r} has characters this subword captioner's tokenizer lacks")
        return tuple(spaced[0])

    def word_tokens(self, key: str, value: Any, vocab: SubwordVocabulary) -> list[list[int]]:
        """A word's token sequences in a subword vocabulary: as it follows a space, and as it starts a
        caption (``SubwordVocabulary.word_sequences``)."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"words must be non-empty strings, got {value!r}")
        return vocab.word_sequences(value.strip())

    def word_id(self, key: str, value: Any, vocab: TokenVocabulary) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"ids must be integers, got {value!r}")
        if not 0 <= value < len(vocab) or value in vocab.special_ids:
            specials = sorted(vocab.special_ids)
            raise self.error(
                key,
                f"id {value} is not a word id (must be in [0, {len(vocab)}), not a special token {specials})",
            )
        return int(value)

    def processor(self, param: str, make: Callable[[], LogitsProcessor]) -> LogitsProcessor:
        """Build a processor, reporting its ``ValueError`` as a ``HookError`` on ``param``."""
        try:
            return make()
        except ValueError as exc:
            raise self.error(param, str(exc)) from exc


Build = Callable[[HookParams, TokenVocabulary, ResolvedHooks], None]


@dataclass(frozen=True)
class HookType:
    """A registry record: ``params`` maps each parameter to a one-line description (anything else in a
    spec's params is refused); ``build`` validates them and adds what the hook asks for to the request's
    ``ResolvedHooks``; a hook that is not ``repeatable`` may be given once per request."""

    name: str
    description: str
    params: Mapping[str, str]
    build: Build
    repeatable: bool = True


HOOKS: dict[str, HookType] = {}


def hook(
    name: str, description: str, params: Mapping[str, str], *, repeatable: bool = True
) -> Callable[[Build], Build]:
    """Register the decorated ``build`` function as the hook ``name`` (see ``HookType``)."""

    def register(build: Build) -> Build:
        if name in HOOKS:
            raise ValueError(f"hook {name!r} is registered twice")
        HOOKS[name] = HookType(name, description, dict(params), build, repeatable)
        return build

    return register


# ------------------------------------------------------------------------------------------ the hooks
@hook("ban_words", "never emit these words", {"words": "list of vocabulary words", "ids": "list of word ids"})
def _ban_words(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    if isinstance(vocab, SubwordVocabulary):  # a word may be several tokens: banned as a sequence
        seqs = [s for w in p.items("words") for s in p.word_tokens("words", w, vocab)]
        seqs += [[p.word_id("ids", i, vocab)] for i in p.items("ids")]
        if not seqs:
            raise p.error("words", "required: at least one word (or id) to ban")
        out.processors.append(p.processor("words", lambda: BanSequences(seqs)))
        return
    ids = [p.word("words", w, vocab) for w in p.items("words")]
    ids += [p.word_id("ids", i, vocab) for i in p.items("ids")]
    if not ids:
        raise p.error("words", "required: at least one word (or id) to ban")
    out.processors.append(p.processor("words", lambda: BanWords(ids)))


@hook("no_repeat_ngram", "no n-gram twice in a caption", {"n": "n-gram size, >= 1 (2 stops 'dog dog dog')"})
def _no_repeat_ngram(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    n = p.integer("n", 1)
    out.processors.append(p.processor("n", lambda: NoRepeatNgram(n)))


@hook("min_length", "no end of caption before min_words words", {"min_words": "integer >= 0, <= max_length"})
def _min_length(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    min_words = p.integer("min_words", 0)
    if min_words > out.min_words or out.min_words_index is None:
        out.min_words, out.min_words_index = max(out.min_words, min_words), p.index


@hook(
    "synonym_substitution",
    "substitutivity (Pantazopoulos et al., 2022): when the most likely word is in S1, emit its S2 synonym "
    "instead",
    {
        "pairs": "[[from, to], ...] or {from: to} (default: the substitutivity synonym table); on a subword "
        "captioner a word is its tokens after a space: it fires where the most likely token is an S1 "
        "word's first token (no look-ahead), then writes the whole S2 word, one token per step; two S1 "
        "words starting with the same token are refused",
        "direction": "default table only: to_category (default, 'puppy'->'dog') or to_fine",
        "return_original": "bool, default true: also return the caption without substitution",
    },
    repeatable=False,
)
def _synonym_substitution(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    direction = p.raw.get("direction")
    if direction is not None and direction not in DIRECTIONS:
        raise p.error("direction", f"must be one of {list(DIRECTIONS)}, got {direction!r}")
    original = p.raw.get("return_original")
    if original is not None and not isinstance(original, bool):
        raise p.error("return_original", f"must be true or false, got {original!r}")
    if p.has("pairs") and direction is not None:
        raise p.error("direction", "applies to the default table only, not with pairs")
    if p.has("pairs"):
        entries = p.items("pairs")
        if not entries:
            raise p.error("pairs", "required: [[from, to], ...] vocabulary words")
    else:
        table = substitution_pairs(load_concepts(), direction or "to_category", vocabulary_words(vocab))
        entries = [list(e) for e in distinct_first_tokens(table, vocab)]
        if not entries:
            raise p.error("pairs", "no pair of the default synonym table is in the model's vocabulary")
    pairs: list[tuple[int, int] | tuple[tuple[int, ...], tuple[int, ...]]] = []
    starts: dict[int, tuple[Any, tuple[int, ...]]] = {}  # S1 first token -> (word, its tokens)
    for entry in entries:
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise p.error("pairs", f"each pair must be [from, to], got {entry!r}")
        if not isinstance(vocab, SubwordVocabulary):
            pairs.append((p.word("pairs", entry[0], vocab), p.word("pairs", entry[1], vocab)))
            continue
        src, dst = p.spaced_word("pairs", entry[0], vocab), p.spaced_word("pairs", entry[1], vocab)
        word, seen = starts.setdefault(src[0], (entry[0], src))
        if seen != src:
            raise p.error(
                "pairs",
                f"{word!r} and {entry[0]!r} both start with token {src[0]} for this subword captioner: "
                "the hook fires on an S1 word's first token and cannot tell them apart",
            )
        pairs.append((src, dst))
    out.processors.append(p.processor("pairs", lambda: SynonymSubstitution(pairs)))
    if original is not False:
        out.compare_without = p.index


@hook(
    "diverse_beam",
    "diverse beam search (Vijayakumar et al. 2018, Hamming diversity)",
    {
        "groups": "number of beam groups, >= 1, divides the beam size",
        "diversity_penalty": f">= 0, per earlier group's pick (default {DEFAULT_DIVERSITY_PENALTY})",
    },
    repeatable=False,
)
def _diverse_beam(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    out.groups = p.integer("groups", 1)
    out.diversity_penalty = p.number("diversity_penalty", DEFAULT_DIVERSITY_PENALTY, 0.0)
    out.diverse_index = p.index


@hook(
    "force_words",
    "decode exactly these word ids, then the end of the caption (teacher forcing: explanations of a "
    "caption the client gives; use with beam_size 1 and max_length = the number of ids)",
    {"ids": "list of word ids (the captioner's own token ids), in order"},
    repeatable=False,
)
def _force_words(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    ids = [p.word_id("ids", i, vocab) for i in p.items("ids")]
    if not ids:
        raise p.error("ids", "required: at least one word id")
    out.processors.append(p.processor("ids", lambda: ForceWords(ids, vocab.eos_id)))


@hook(
    "ranker_guided",
    "search for what the ranker would choose: every `every` words, each beam's `pool` most likely next "
    "words are re-scored by log-prob + weight × the ranker's cosine between the partial caption and "
    "the image (× its length normalisation), so the beams the ranker favours are kept; a finished "
    "caption scores its normalised log-prob + weight × its whole text's cosine",
    {
        "every": f"re-score the words every k steps, integer >= 1 (default {DEFAULT_GUIDE_EVERY})",
        "weight": f"λ, 0-100 (default {DEFAULT_GUIDE_WEIGHT:g}; 0: plain beam search)",
        "pool": f"words re-scored per beam, 1-50 (default {DEFAULT_GUIDE_POOL}); "
        f"beam_size × (pool + 1) <= {MAX_GUIDE_TEXTS}",
        "ranker": "a ranker name (GET /v1/models; default: the captioner's own ranking head)",
    },
    repeatable=False,
)
def _ranker_guided(p: HookParams, vocab: TokenVocabulary, out: ResolvedHooks) -> None:
    every = p.integer("every", 1) if p.has("every") else DEFAULT_GUIDE_EVERY
    pool = p.integer("pool", 1) if p.has("pool") else DEFAULT_GUIDE_POOL
    weight = p.number("weight", DEFAULT_GUIDE_WEIGHT, 0.0)
    ranker = p.raw.get("ranker")
    if ranker is not None and (not isinstance(ranker, str) or not ranker):
        raise p.error("ranker", f"must be a ranker name, got {ranker!r}")
    if pool > MAX_GUIDE_POOL:
        raise p.error("pool", f"must be <= {MAX_GUIDE_POOL}, got {pool}")
    if weight > MAX_GUIDE_WEIGHT:
        raise p.error("weight", f"must be <= {MAX_GUIDE_WEIGHT:g}, got {weight}")
    out.guide, out.guide_index = RankerGuide(every, weight, pool, ranker), p.index


# ------------------------------------------------------------------------------------- the registry
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


def resolve_hooks(specs: Sequence[Any] | None, vocab: TokenVocabulary) -> ResolvedHooks:
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
            raise HookError(
                name, None, f"unknown hook{did_you_mean(name, HOOKS)} (known: {', '.join(HOOKS)})", index
            )
        if not kind.repeatable and name in out.names:
            raise HookError(name, None, "may be given only once", index)
        kind.build(HookParams(name, index, raw, kind.params), vocab, out)
        out.names.append(name)
    return out


__all__ = [
    "DEFAULT_DIVERSITY_PENALTY",
    "DEFAULT_GUIDE_EVERY",
    "DEFAULT_GUIDE_POOL",
    "DEFAULT_GUIDE_WEIGHT",
    "HOOKS",
    "MAX_GUIDE_TEXTS",
    "MAX_HOOKS",
    "MAX_WORDS",
    "HookError",
    "HookParams",
    "HookType",
    "ResolvedHooks",
    "hook",
    "hook_catalog",
    "resolve_hooks",
    "spec_parts",
]
