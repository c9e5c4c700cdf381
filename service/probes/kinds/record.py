"""The probe-kind record: everything one kind of live probe is, in one place. The router validates a
request with it, the job runs it, the gauges record its result, the schedule and ``compcap probe`` (its
table) read it, and ``GET /v1/probe-kinds`` serves what the others read (``describe``): the web page
draws a result from its ``view`` (``service.probes.kinds.view``) and shows its one-line summary, the
client labels its ``figures`` and documents its ``fields``; ``service.probes.kinds`` holds the
registry. Adding a kind is one module with its record, its line in ``service.probes.kinds``, its test
and its docs.

A kind reads probe sets of one format (``sets``: ``systematicity``, ``productivity`` or
``substitutivity``, see ``service.probesets``) and decodes them through the engine with ``decode``
(background priority, the same ``caption_many`` path the offline studies use), reporting its progress
(images decoded of the total) and, where it has one, a partial result as it goes."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from service.api.gate import RequestError
from service.engine.params import SearchParams
from service.engine.request import Priority
from service.probes.kinds.view import Figure, KindView
from service.probesets import get_format
from service.text.concepts import ConceptPair

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from service.engine.client import EngineClient
    from service.probes.scoring.parser import PairParser
    from service.probesets import ProbeSet, SetFormat


@dataclass
class Progress:
    """What a running probe reports: images decoded of ``total``, and a partial result."""

    total: int = 0
    done: int = 0
    partial: dict[str, Any] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)

    def advance(self, n: int) -> None:
        self.done += n


class KindGauges(Protocol):
    """A kind's Prometheus gauges: set from every succeeded result, and from an accepted one."""

    def record(self, model: str, ranker: str, result: Mapping[str, Any]) -> None: ...

    def accept(self, model: str, ranker: str, result: Mapping[str, Any]) -> None: ...


Runner = Callable[["KindRun"], Awaitable[dict[str, Any]]]
Check = Callable[["ProbeSet", "tuple[str, ...] | None"], None]
Compare = Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ProbeSpec:
    kind: str
    probe_set: str
    params: SearchParams
    pairs: tuple[str, ...] | None  # kinds that take pairs: the pair labels reported (None: all)
    images: int | None  # at most this many images per pair / bucket (None: all)
    scheduled: bool = False

    @property
    def model(self) -> str:
        return self.params.model

    @property
    def ranker(self) -> str | None:
        return self.params.ranker

    def to_dict(self) -> dict[str, Any]:
        p = self.params
        return {
            "kind": self.kind,
            "probe_set": self.probe_set,
            "model": p.model,
            "rerank": p.ranker or False,
            "beam_size": p.beam_size,
            "n_best": p.n_best,
            "rerank_weight": p.rerank_weight,
            "pairs": list(self.pairs) if self.pairs is not None else None,
            "images": self.images,
            "scheduled": self.scheduled,
        }


@dataclass(frozen=True)
class KindRun:
    """What a kind's ``run`` is handed: the engine it decodes with, the request (``spec``), the probe
    set it names, the parser process and the job's ``progress``."""

    engine: EngineClient
    spec: ProbeSpec
    probe_set: ProbeSet
    parser: PairParser
    progress: Progress

    def declared_held_out(self) -> list[ConceptPair] | None:
        """The pairs the request's captioner was trained without, or None when its import declared none
        (an imported captioner: per-pair figures only)."""
        training = self.engine.manifest.captioner(self.spec.model).training
        if not training.held_out_known:
            return None
        return [ConceptPair(p.kind, p.modifier, p.noun) for p in training.held_out_pairs]


def no_check(probe_set: ProbeSet, pairs: tuple[str, ...] | None) -> None:
    """A kind that takes any set of its format and no ``pairs``."""


class HasPair(Protocol):
    """An entry of a probe set that belongs to one concept pair (``builtin.PairImages``,
    ``builtin.PairMinimalPairs``)."""

    @property
    def pair(self) -> ConceptPair: ...


E = TypeVar("E", bound=HasPair)


def pairs_check(entries: Callable[[ProbeSet], Sequence[HasPair]]) -> Check:
    """The ``check`` of a kind that takes ``pairs``: every label is one of the pairs of the set's
    ``entries`` (422 naming ``pairs.<n>``)."""

    def check(probe_set: ProbeSet, pairs: tuple[str, ...] | None) -> None:
        if pairs is not None:
            check_labels(pairs, {e.pair.label for e in entries(probe_set)})

    return check


def pairs_details(
    entries: Callable[[ProbeSet], Sequence[E]], row: Callable[[E], dict[str, Any]]
) -> Callable[[ProbeSet], dict[str, Any]]:
    """The ``set_details`` of a kind that takes ``pairs``: each pair of the set's ``entries``, its label
    and ``row(entry)`` (e.g. its image counts)."""

    def set_details(probe_set: ProbeSet) -> dict[str, Any]:
        return {"pairs": [{"pair": e.pair.label, **row(e)} for e in entries(probe_set)]}

    return set_details


@dataclass(frozen=True)
class ProbeKind:
    """One kind of live probe.

    - ``run(job)``: the result (a JSON-able dict) of the request ``job`` (a ``KindRun``: the engine,
      the spec, the probe set, the parser and the progress);
    - ``sets``: the probe-set format it reads (default: its ``set_format``'s name, else its own name);
    - ``set_format``: a probe-set format of its own (``service.probesets.SetFormat``: its keys of
      ``probe.json`` and their check), registered with the kind and removed with it;
    - ``takes_pairs``: whether a request may name ``pairs`` (labels of the set's concept pairs);
    - ``check(probe_set, pairs)``: what else a request must satisfy (raises the kit's ``RequestError``);
    - ``gauges(registry)``: its gauges on the gateway's registry (None: only the common ones);
    - ``table(result)``: ``compcap probe``'s lines; ``summary(result)``: one line for job listings
      and the web page;
    - ``set_details(probe_set)``: extra fields of its sets in ``GET /v1/probe-sets``;
    - ``compare(a, b)``: paired tests of two of its results on the images both hold, ``{"figures":
      {name: test or None}, "intervals": how}`` (``ValueError`` naming why they are not comparable);
      None: its results cannot be compared;
    - ``fields``: its result's keys, each with what it holds (every figure ``X`` has its ``X_interval``
      beside it, not listed);
    - ``figures``: its headline figures and their labels (``view.Figure``), which the client reads;
    - ``view``: how the web page draws a result (``view.KindView``: the launcher's words, its chart,
      its shares; the default draws none, the summary line only)."""

    name: str
    description: str
    run: Runner
    sets: str = ""
    set_format: SetFormat | None = None
    takes_pairs: bool = False
    check: Check = no_check
    gauges: Callable[[CollectorRegistry], KindGauges] | None = None
    table: Callable[[Mapping[str, Any]], list[str]] | None = None
    summary: Callable[[Mapping[str, Any]], str] | None = None
    set_details: Callable[[ProbeSet], dict[str, Any]] | None = None
    compare: Compare | None = None
    fields: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    figures: tuple[Figure, ...] = ()
    view: KindView = field(default_factory=KindView, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum() or not self.name.islower():
            raise ValueError(f"name must be lower-case letters, digits and '_', got {self.name!r}")
        if self.set_format is not None and self.sets not in ("", self.set_format.name):
            raise ValueError(f"sets must name its set_format {self.set_format.name!r}, got {self.sets!r}")
        if not self.sets:
            object.__setattr__(self, "sets", self.set_format.name if self.set_format else self.name)

    @functools.cached_property
    def gauge_help(self) -> list[dict[str, str]]:
        """Its gauges' names and help texts (made once on a registry of their own)."""
        if self.gauges is None:
            return []
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=True)
        self.gauges(registry)
        return [{"name": m.name, "help": m.documentation} for m in registry.collect()]

    def describe(self) -> dict[str, Any]:
        """``GET /v1/probe-kinds``'s entry: what the web page and the client read of the kind."""
        fmt = get_format(self.sets)
        return {
            "name": self.name,
            "description": self.description,
            "probe_sets": self.sets,
            "takes_pairs": self.takes_pairs,
            "set_format": fmt.describe() if fmt is not None else None,
            "fields": dict(self.fields),
            "figures": [f.to_json() for f in self.figures],
            "gauges": self.gauge_help,
            "view": self.view.to_json(),
        }


MODULE_NAMES = {
    "run": "run",
    "check": "check",
    "Gauges": "gauges",
    "lines": "table",
    "summary": "summary",
    "set_details": "set_details",
    "compare": "compare",
    "FIELDS": "fields",
    "FIGURES": "figures",
    "VIEW": "view",
}  # a kind module's name -> the field of its record it fills (``module_kind``)


def module_kind(namespace: Mapping[str, Any], **record: Any) -> ProbeKind:
    """The record of the kind module whose names are ``namespace`` (its ``globals()``): each name of
    ``MODULE_NAMES`` it holds (``run``, ``check``, ``Gauges``, ``lines``: its table, ``summary``,
    ``set_details``, ``compare``, ``FIELDS``, ``FIGURES``, ``VIEW``) fills its field; ``record``, the
    rest (``name``, ``description``, ``takes_pairs``, ...) and what the module imports, e.g. its scoring
    module's ``compare``."""
    named = {field: namespace[name] for name, field in MODULE_NAMES.items() if name in namespace}
    return ProbeKind(**(named | record))


def cap(ids: Sequence[int], n: int | None) -> list[int]:
    """The first ``n`` of ``ids`` (all when ``n`` is None)."""
    return list(ids if n is None else ids[:n])


async def decode(
    engine: EngineClient, probe_set: ProbeSet, ids: Sequence[int], params: SearchParams, progress: Progress
) -> dict[int, list[str]]:
    """Image id -> captions in final order, decoded at background priority."""
    if not ids:
        return {}
    image = engine.manifest.image
    pixels = await asyncio.to_thread(probe_set.images, list(ids), image.height, image.width)
    out = await engine.caption_many(pixels, params, priority=Priority.BACKGROUND, progress=progress.advance)
    return {i: [c.text for c in per] for i, per in zip(ids, out, strict=True)}


def invalid(message: str, field: str) -> RequestError:
    """A 422 ``invalid_probe`` naming ``field``."""
    return RequestError(422, "invalid_probe", message, field=field)


def check_labels(pairs: Sequence[str] | None, known: set[str]) -> None:
    """Every label of ``pairs`` (None: every pair) is one of ``known`` (422 naming ``pairs.<n>``)."""
    for n, label in enumerate(pairs or ()):
        if label not in known:
            raise invalid(f"unknown pair {label!r} (known: {', '.join(sorted(known))})", f"pairs.{n}")


__all__ = [
    "MODULE_NAMES",
    "KindGauges",
    "KindRun",
    "ProbeKind",
    "ProbeSpec",
    "Progress",
    "cap",
    "check_labels",
    "decode",
    "invalid",
    "module_kind",
    "no_check",
    "pairs_check",
    "pairs_details",
]
