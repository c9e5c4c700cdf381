"""The registry of probe kinds (``service.probes.kinds.record.ProbeKind``): the three of the papers —
systematicity (Nikolaus et al., 2019), productivity and substitutivity (Pantazopoulos et al., 2022) —,
counterfactual minimal pairs, and any a deployment or a test registers. The router, the schedule, the
job's runner and gauges, ``compcap probe``'s tables and ``GET /v1/probe-kinds`` (which the client and
the web page read) all look kinds up here."""

from __future__ import annotations

from service.probes.kinds import (
    counterfactual_kind,
    productivity_kind,
    substitutivity_kind,
    systematicity_kind,
)
from service.probes.kinds.record import ProbeKind
from service.probesets import register_format, unregister_format

KINDS: dict[str, ProbeKind] = {}


def register(kind: ProbeKind) -> ProbeKind:
    """Add ``kind``, and the probe-set format it brings (``set_format``); a name registered already,
    or another format of the same name, is refused (``ValueError``)."""
    if kind.name in KINDS:
        raise ValueError(f"probe kind {kind.name!r} is registered already")
    if kind.set_format is not None:
        register_format(kind.set_format)
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind ``name`` and the format it brought, unless another kind reads it (a no-op when
    it is not registered)."""
    kind = KINDS.pop(name, None)
    fmt = kind.set_format if kind is not None else None
    if fmt is not None and not any(k.set_format is fmt for k in KINDS.values()):
        unregister_format(fmt.name)


def kind_names() -> tuple[str, ...]:
    """The registered kinds' names, in registration order."""
    return tuple(KINDS)


def get_kind(name: str) -> ProbeKind | None:
    return KINDS.get(name)


for _builtin in (systematicity_kind, productivity_kind, substitutivity_kind, counterfactual_kind):
    register(_builtin.KIND)

__all__ = ["KINDS", "get_kind", "kind_names", "register", "unregister"]
