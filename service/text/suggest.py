"""``did you mean``: the known name closest to a misspelt one (``difflib.get_close_matches``), for the
messages that refuse an unknown field, option, hook, parameter, method or model."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: object, known: Iterable[object]) -> str | None:
    """The known name most like ``name`` (difflib's ratio ≥ 0.6), or None."""
    if not isinstance(name, str) or not name:
        return None
    candidates = [str(k) for k in known if str(k) != name]
    found = difflib.get_close_matches(name, candidates, n=1)
    if not found and name.lower() != name:  # BEAM_SIZE -> beam_size
        found = [c for c in candidates if c.lower() == name.lower()][:1]
    return found[0] if found else None


def did_you_mean(name: object, known: Iterable[object]) -> str:
    """`` (did you mean 'beam_size'?)`` for a ``name`` close to one of ``known``, else ``""``."""
    match = closest(name, known)
    return "" if match is None else f" (did you mean {match!r}?)"


__all__ = ["closest", "did_you_mean"]
