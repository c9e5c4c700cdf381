"""``SearchParams``: everything one request's search needs, resolved once and frozen; ``resolve_params``
turns request options into it against the manifest and the engine's settings (``EngineSettings``).

Errors name the option at fault (``EngineError.field``) so the API can answer 4xx with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from service.checks import at_least, within
from service.engine.hooks import HookError, ResolvedHooks, resolve_hooks, spec_parts
from service.engine.processors import LogitsProcessor, RankerGuide
from service.engine.settings import EngineSettings
from service.manifest import Manifest
from service.text.subword import TokenVocabulary
from service.text.suggest import did_you_mean

MAX_RERANK_WEIGHT = 10.0
MAX_LENGTH_PENALTY = 2.0


def check_rerank_weight(weight: float) -> float:
    """``weight`` if it is a valid ``rerank_weight`` (in ``[0, MAX_RERANK_WEIGHT]``), else ``ValueError``:
    the one bounds check of the weight (``SearchParams``, ``resolve_params`` and ``rerank_order`` call
    it; the HTTP schema declares the same bounds from ``MAX_RERANK_WEIGHT``)."""
    within(0, MAX_RERANK_WEIGHT, rerank_weight=weight)
    return float(weight)


class EngineError(Exception):
    """A request the engine refuses. ``code`` is a stable reason; ``field`` the parameter at fault."""

    code = "invalid_parameter"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class InvalidParameterError(EngineError):
    code = "invalid_parameter"


class UnknownModelError(EngineError):
    code = "unknown_model"


class OverloadedError(EngineError):
    """The decoding queue is full: answer 503 with ``Retry-After``."""

    code = "overloaded"

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("request", f"the decoding queue is full; retry after {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class SearchParams:
    """One request's search, carried unchanged from ``resolve_params`` down to the beam batch.

    ``n_best`` captions are returned per image. A re-ranked request (``ranker`` set) keeps all
    ``beam_size`` finished beams for the ranker, orders them by cosine + ``rerank_weight`` ×
    normalised log-prob, then cuts to ``n_best`` (BUTR+RR of Nikolaus et al., 2019: beam 100, n-best 5).
    ``processors`` run on the request's rows in order; ``hook_names`` are the JSON hooks that asked
    for them (and for ``min_length`` / ``groups``), for the response and the hook counter;
    ``compare_without`` is the index of a hook in the request's ``hooks`` that asks for the same search
    without it too (``synonym_substitution``'s ``return_original``), for the caller to decode.
    ``hooks``: the request's hook specs as plain data (``{"name", "params"}``), from which
    ``resolve_params`` built the processors; ``options()`` gives back what resolves to these params
    (what crosses to an engine core in another process, which resolves it again)."""

    model: str
    beam_size: int = 5
    n_best: int = 5
    max_length: int = 16
    min_length: int = 1
    length_penalty: float = 1.0
    groups: int = 1
    diversity_penalty: float = 0.0
    processors: tuple[LogitsProcessor, ...] = ()
    ranker: str | None = None
    rerank_weight: float = 0.0
    hook_names: tuple[str, ...] = ()
    search: Literal["compcap", "transformers"] = "compcap"  # the captioner's beam search (README)
    early_stopping: bool = False  # transformers search: stop at n finished captions
    compare_without: int | None = None  # a hook that asks for the captions without it too (its index)
    hooks: tuple[dict[str, Any], ...] = ()  # the hook specs the processors came from, as plain data
    guide: RankerGuide | None = None  # ranker_guided (its ranker resolved to a name): the scheduler's

    def __post_init__(self) -> None:
        at_least(1, beam_size=self.beam_size)
        if not 1 <= self.n_best <= self.beam_size:
            raise ValueError(f"n_best must be in [1, beam_size={self.beam_size}], got {self.n_best}")
        at_least(1, max_length=self.max_length)
        if not 0 <= self.min_length <= self.max_length:
            raise ValueError(f"min_length must be in [0, max_length], got {self.min_length}")
        within(0, MAX_LENGTH_PENALTY, length_penalty=self.length_penalty)
        if self.groups < 1 or self.beam_size % self.groups:
            raise ValueError(f"groups must be >= 1 and divide beam_size={self.beam_size}, got {self.groups}")
        at_least(0, diversity_penalty=self.diversity_penalty)
        check_rerank_weight(self.rerank_weight)
        if self.rerank_weight and self.ranker is None:
            raise ValueError("rerank_weight needs a ranker")

    @property
    def search_n_best(self) -> int:
        """Finished beams the search keeps: all of them when a ranker re-ranks, else ``n_best``."""
        return self.beam_size if self.ranker is not None else self.n_best

    def rows(self, n_images: int) -> int:
        """Rows this request may occupy in one step call."""
        return n_images * self.beam_size

    def options(self) -> dict[str, Any]:
        """The request options ``resolve_params`` turns into these params again (plain data).
        ``ValueError`` for params whose processors came from no hook spec (built in code): they
        cannot be re-created elsewhere."""
        if self.processors and not self.hooks:
            raise ValueError("these params' processors were built in code, not from hook specs")
        return {
            "model": self.model,
            "beam_size": self.beam_size,
            "max_length": self.max_length,
            "n_best": self.n_best,
            "rerank": self.ranker if self.ranker is not None else False,
            "length_penalty": self.length_penalty,
            "hooks": [dict(spec) for spec in self.hooks],
            "rerank_weight": self.rerank_weight,
        }


def resolve_params(
    manifest: Manifest,
    vocab: TokenVocabulary | Mapping[str, TokenVocabulary],
    settings: EngineSettings,
    model: str | None = None,
    beam_size: int | None = None,
    max_length: int | None = None,
    n_best: int | None = None,
    rerank: str | bool | None = None,
    length_penalty: float = 1.0,
    hooks: Sequence[Any] | None = None,
    rerank_weight: float = 0.0,
) -> SearchParams:
    """Validate request options; defaults come from ``settings`` and the manifest (README, API).
    ``vocab``: the captioners' tokens, by captioner (or one vocabulary for all)."""
    name = model or manifest.default_captioner
    try:
        cap = manifest.captioner(name)
    except KeyError:
        names = [c.name for c in manifest.captioners]
        raise UnknownModelError(
            "model", f"unknown model {name!r}{did_you_mean(name, names)}; captioners: {', '.join(names)}"
        ) from None
    beam = settings.default_beam_size if beam_size is None else beam_size
    if not 1 <= beam <= settings.max_beam_size:
        raise InvalidParameterError("beam_size", f"beam_size must be in [1, {settings.max_beam_size}]")
    cap_len = min(settings.max_length_cap, cap.max_length)
    length = cap_len if max_length is None else max_length
    if not 1 <= length <= cap_len:
        raise InvalidParameterError("max_length", f"max_length must be in [1, {cap_len}] for {cap.name}")
    best = beam if n_best is None else n_best
    if not 1 <= best <= beam:
        raise InvalidParameterError("n_best", f"n_best must be in [1, beam_size={beam}]")
    if not 0.0 <= length_penalty <= MAX_LENGTH_PENALTY:
        raise InvalidParameterError("length_penalty", f"length_penalty must be in [0, {MAX_LENGTH_PENALTY}]")
    ranker = _ranker(manifest, cap.name, cap.ranker, rerank)
    tokens = vocab[cap.name] if isinstance(vocab, Mapping) else vocab
    try:
        check_rerank_weight(rerank_weight)
    except ValueError as exc:
        raise InvalidParameterError("rerank_weight", str(exc)) from None
    if rerank_weight and ranker is None:
        raise InvalidParameterError(
            "rerank_weight", "rerank_weight weighs a ranker's order, but this request is not re-ranked"
        )
    try:
        resolved = resolve_hooks(hooks, tokens)
        resolved.check(beam, length)
    except HookError as exc:
        raise InvalidParameterError(".".join(str(p) for p in exc.loc), str(exc)) from None
    specs = tuple(plain_spec(spec, index) for index, spec in enumerate(hooks or []))
    guide = _guide(manifest, cap.name, cap.ranker, resolved)
    return SearchParams(
        model=cap.name,
        beam_size=beam,
        n_best=best,
        max_length=length,
        # CompCap's search never ends a caption before its first word; transformers' may (min_length 0)
        min_length=resolved.min_words if cap.search == "transformers" else max(1, resolved.min_words),
        length_penalty=float(length_penalty),
        groups=resolved.groups,
        diversity_penalty=resolved.diversity_penalty,
        processors=tuple(resolved.processors),
        ranker=ranker,
        rerank_weight=float(rerank_weight),
        hook_names=resolved.ordered_names,
        compare_without=resolved.compare_without,
        search=cap.search,
        early_stopping=cap.early_stopping or beam == 1,  # one beam: generate's greedy search
        hooks=specs,
        guide=guide,
    )


def _guide(
    manifest: Manifest, captioner: str, own: str | None, resolved: ResolvedHooks
) -> RankerGuide | None:
    """The ``ranker_guided`` hook with its ranker resolved to a name of the manifest (the captioner's own
    by default); an error names ``hooks.<i>.params.ranker``."""
    guide = resolved.guide
    if guide is None:
        return None
    where = f"hooks.{resolved.guide_index}.params.ranker"
    rankers = [r.name for r in manifest.rankers]
    known = ", ".join(rankers) or "(none)"
    name = guide.ranker or own
    if name is None:
        raise InvalidParameterError(where, f"{captioner} has no ranker of its own; name one of {known}")
    if name not in rankers:
        raise InvalidParameterError(
            where, f"unknown ranker {name!r}{did_you_mean(name, rankers)}; rankers: {known}"
        )
    return RankerGuide(guide.every, guide.weight, guide.pool, name)


def plain_spec(spec: Any, index: int) -> dict[str, Any]:
    """A hook spec (a dict or a pydantic model, already validated) as plain data."""
    name, params = spec_parts(spec, index)
    return {"name": name, "params": _plain(params)}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _ranker(manifest: Manifest, captioner: str, own: str | None, rerank: str | bool | None) -> str | None:
    rankers = ", ".join(r.name for r in manifest.rankers) or "(none)"
    if rerank is None or rerank is True:
        if rerank is True and own is None:
            raise InvalidParameterError(
                "rerank", f"{captioner} has no ranker of its own; name one of {rankers}"
            )
        return own
    if rerank is False:
        return None
    if rerank not in {r.name for r in manifest.rankers}:
        known = [r.name for r in manifest.rankers]
        raise UnknownModelError(
            "rerank", f"unknown ranker {rerank!r}{did_you_mean(rerank, known)}; rankers: {rankers}"
        )
    return rerank
