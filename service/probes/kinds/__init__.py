"""The registry of probe kinds (``service.probes.kind.ProbeKind``): the three of the seeds —
systematicity (seed 000), productivity and substitutivity (seed 001) —, counterfactual minimal pairs
(issue 41), and any a deployment or a test registers. The router, the schedule, the job's runner and
gauges, ``compcap probe``'s tables and ``GET /v1/probe-kinds`` (which the client and the web page
read) all look kinds up here."""

from __future__ import annotations

from service.probes.kind import ProbeKind
from service.probes.kinds import counterfactual, productivity, substitutivity, systematicity

KINDS: dict[str, ProbeKind] = {}


def register(kind: ProbeKind) -> ProbeKind:
    """Add ``kind``; a name registered already is refused (``ValueError``)."""
    if kind.name in KINDS:
        raise ValueError(f"probe kind {kind.name!r} is registered already")
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind ``name`` (a no-op when it is not registered)."""
    KINDS.pop(name, None)


def kind_names() -> tuple[str, ...]:
    """The registered kinds' names, in registration order."""
    return tuple(KINDS)


def get_kind(name: str) -> ProbeKind | None:
    return KINDS.get(name)


for _builtin in (systematicity.KIND, productivity.KIND, substitutivity.KIND, counterfactual.KIND):
    register(_builtin)

__all__ = ["KINDS", "get_kind", "kind_names", "register", "unregister"]
