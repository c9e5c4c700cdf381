"""``COMPCAP_PROBE_SCHEDULE``: probes the gateway runs by itself, once the models are loaded and then
every interval, so that their gauges stay current for Grafana.

Format: ``;``-separated ``key=value`` fields, e.g.
``every=15m;kinds=systematicity,substitutivity;models=butr+butr,butd;images=20``

- ``every`` (required): ``90s``, ``15m``, ``1h`` or seconds;
- ``kinds``: probe kinds (default: every registered kind, ``service.probes.kinds``);
- ``models``: captioner or ``captioner+ranker`` runs (default: the default captioner, plain);
- ``images``: at most this many images per pair / bucket (default: all);
- ``beam``: beam size of plain runs (default 5); ``rerank_beam``: beams a re-ranked run decodes and
  re-ranks (default 100, as BUTR+RR in Nikolaus et al., 2019); both keep ``n_best = 5`` (Recall@1..5).
Runs go one after another (never more than one scheduled probe at a time)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from service.probes.kinds import kind_names

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")
MIN_INTERVAL_S = 10.0


@dataclass(frozen=True)
class ProbeSchedule:
    interval_s: float
    kinds: tuple[str, ...] = field(default_factory=kind_names)
    runs: tuple[tuple[str | None, str | None], ...] = ((None, None),)  # (captioner, ranker); None: defaults
    images: int | None = None
    beam: int = 5
    rerank_beam: int = 100
    n_best: int = 5

    def search(self, model: str | None, ranker: str | None) -> dict[str, object]:
        """Engine options of one run."""
        beam = self.rerank_beam if ranker else self.beam
        return {
            "model": model,
            "rerank": ranker or False,
            "beam_size": beam,
            "n_best": min(self.n_best, beam),
        }


def parse_duration(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"every: {text!r} is not a duration like 90s, 15m or 1h")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def parse_schedule(text: str) -> ProbeSchedule:
    """The schedule of ``text`` (see module docstring); ``ValueError`` names the field at fault."""
    fields: dict[str, str] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("every", "kinds", "models", "images", "beam", "rerank_beam"):
            raise ValueError(
                f"{part!r}: expected key=value with key every, kinds, models, images, beam or rerank_beam"
            )
        fields[key] = value.strip()
    if "every" not in fields:
        raise ValueError("every: required (e.g. every=15m)")
    interval = parse_duration(fields["every"])
    if interval < MIN_INTERVAL_S:
        raise ValueError(f"every: at least {MIN_INTERVAL_S:.0f} s, got {interval:g} s")
    known = kind_names()
    kinds = tuple(k.strip() for k in fields.get("kinds", ",".join(known)).split(",") if k.strip())
    for k in kinds:
        if k not in known:
            raise ValueError(f"kinds: {k!r} is not one of {', '.join(known)}")
    runs: list[tuple[str | None, str | None]] = []
    for item in (m.strip() for m in fields.get("models", "").split(",")):
        if item:
            model, _, ranker = item.partition("+")
            runs.append((model.strip(), ranker.strip() or None))
    numbers: dict[str, int] = {}
    for key in ("images", "beam", "rerank_beam"):
        if key in fields:
            try:
                numbers[key] = int(fields[key])
            except ValueError:
                raise ValueError(f"{key}: {fields[key]!r} is not an integer") from None
            if numbers[key] < 1:
                raise ValueError(f"{key}: must be >= 1, got {numbers[key]}")
    return ProbeSchedule(
        interval_s=interval,
        kinds=kinds or known,
        runs=tuple(runs) or ((None, None),),
        images=numbers.get("images"),
        beam=numbers.get("beam", 5),
        rerank_beam=numbers.get("rerank_beam", 100),
    )


__all__ = ["ProbeSchedule", "parse_duration", "parse_schedule"]
