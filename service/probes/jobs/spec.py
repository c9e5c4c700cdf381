"""A probe request, validated once against the manifest, its probe sets and the engine's parameter
rules into a frozen ``ProbeSpec`` (the probe's ``SearchParams`` included)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.api.gate import RequestError
from service.engine.client import EngineClient
from service.probes.kinds import KINDS
from service.probes.kinds.record import ProbeKind, ProbeSpec, invalid
from service.probesets import ProbeSet
from service.text.suggest import did_you_mean


def choose_probe_set(kind: ProbeKind, name: str | None, sets: Mapping[str, ProbeSet]) -> ProbeSet:
    """The probe set ``name`` (or the first of ``kind``'s format), checked to fit ``kind``."""
    if name is None:
        found = [s for s in sets.values() if s.kind == kind.sets]
        if not found:
            raise RequestError(
                404,
                "unknown_probe_set",
                f"the repository has no {kind.sets} probe set (add them with "
                "`compcap probesets --repo REPO`, or `make probesets`)",
                field="probe_set",
            )
        return found[0]
    if name not in sets:
        known = ", ".join(sorted(sets)) or "none"
        raise RequestError(
            404,
            "unknown_probe_set",
            f"unknown probe set {name!r}{did_you_mean(name, sets)} (known: {known})",
            field="probe_set",
        )
    chosen = sets[name]
    if chosen.kind != kind.sets:
        raise invalid(f"probe set {name!r} is a {chosen.kind} set, not {kind.sets}", "probe_set")
    return chosen


def check_pairs(pairs: Sequence[str] | None, kind: ProbeKind) -> tuple[str, ...] | None:
    """``pairs`` without repeats, for a kind that takes them."""
    if pairs is None:
        return None
    if not kind.takes_pairs:
        takes = [k.name for k in KINDS.values() if k.takes_pairs]
        raise invalid(f"pairs applies to {' and '.join(takes) or 'no'} probes, not {kind.name}", "pairs")
    if not pairs:
        raise invalid("pairs is empty; leave it out for every pair", "pairs")
    return tuple(dict.fromkeys(pairs))


def build_spec(
    engine: EngineClient,
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
    record = KINDS.get(kind)
    if record is None:
        raise invalid(f"kind must be one of {list(KINDS)}, got {kind!r}{did_you_mean(kind, KINDS)}", "kind")
    if images is not None and images < 1:
        raise invalid(f"images must be >= 1, got {images}", "images")
    params = engine.resolve(**{k: v for k, v in search.items() if v is not None})
    chosen = choose_probe_set(record, probe_set, sets)
    checked = check_pairs(pairs, record)
    record.check(chosen, checked)
    return ProbeSpec(kind, chosen.name, params, checked, images, scheduled)


__all__ = ["ProbeSpec", "build_spec", "choose_probe_set"]
