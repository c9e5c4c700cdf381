"""A probe request, validated once against the manifest, its probe sets and the engine's parameter
rules into a frozen ``ProbeSpec`` (the probe's ``SearchParams`` included)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.api.gate import RequestError
from service.engine.engine import CaptionEngine
from service.engine.params import SearchParams
from service.probes.sets import KINDS, ProbeSet


@dataclass(frozen=True)
class ProbeSpec:
    kind: str
    probe_set: str
    params: SearchParams
    pairs: tuple[str, ...] | None  # systematicity: the pair labels reported (None: all)
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


def choose_probe_set(kind: str, name: str | None, sets: Mapping[str, ProbeSet]) -> ProbeSet:
    """The probe set ``name`` (or the first of ``kind``), checked to fit ``kind``."""
    if name is None:
        found = [s for s in sets.values() if s.kind == kind]
        if not found:
            raise RequestError(
                404,
                "unknown_probe_set",
                f"the repository has no {kind} probe set (add them with `compcap probesets --repo REPO`, "
                "or `make probesets`)",
                field="probe_set",
            )
        return found[0]
    if name not in sets:
        known = ", ".join(sorted(sets)) or "none"
        raise RequestError(
            404, "unknown_probe_set", f"unknown probe set {name!r} (known: {known})", field="probe_set"
        )
    chosen = sets[name]
    if chosen.kind != kind:
        raise RequestError(
            422, "invalid_probe", f"probe set {name!r} is a {chosen.kind} set, not {kind}", field="probe_set"
        )
    if kind == "productivity" and chosen.objects() is None:
        raise RequestError(
            422,
            "invalid_probe",
            f"probe set {name!r} has no scene graphs (nor instance annotations): productivity's object "
            "coverage needs the objects of each scene",
            field="probe_set",
        )
    return chosen


def check_pairs(pairs: Sequence[str] | None, kind: str, probe_set: ProbeSet) -> tuple[str, ...] | None:
    if pairs is None:
        return None
    if kind != "systematicity":
        raise RequestError(
            422, "invalid_probe", f"pairs applies to systematicity probes, not {kind}", field="pairs"
        )
    known = {p.pair.label for p in probe_set.pairs()}
    for n, label in enumerate(pairs):
        if label not in known:
            raise RequestError(
                422,
                "invalid_probe",
                f"unknown pair {label!r} (known: {', '.join(sorted(known))})",
                field=f"pairs.{n}",
            )
    if not pairs:
        raise RequestError(422, "invalid_probe", "pairs is empty; leave it out for every pair", field="pairs")
    return tuple(dict.fromkeys(pairs))


def build_spec(
    engine: CaptionEngine,
    sets: Mapping[str, ProbeSet],
    kind: str,
    search: Mapping[str, Any],
    probe_set: str | None = None,
    pairs: Sequence[str] | None = None,
    images: int | None = None,
    scheduled: bool = False,
) -> ProbeSpec:
    """Validate a probe request; ``search``: the engine options (model, rerank, beam_size, n_best,
    rerank_weight). Raises the kit's ``RequestError`` (404 ``unknown_probe_set``, 422
    ``invalid_probe``) or the engine's ``EngineError``, naming the field."""
    if kind not in KINDS:
        raise RequestError(
            422, "invalid_probe", f"kind must be one of {list(KINDS)}, got {kind!r}", field="kind"
        )
    if images is not None and images < 1:
        raise RequestError(422, "invalid_probe", f"images must be >= 1, got {images}", field="images")
    params = engine.resolve(**{k: v for k, v in search.items() if v is not None})
    chosen = choose_probe_set(kind, probe_set, sets)
    return ProbeSpec(kind, chosen.name, params, check_pairs(pairs, kind, chosen), images, scheduled)


__all__ = ["ProbeSpec", "build_spec", "choose_probe_set"]
