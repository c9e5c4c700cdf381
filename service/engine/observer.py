"""The per-request step observer: how a feature package (probes, explanations, comparison) watches a
request decode without anything research-specific inside the engine.

A request submitted with ``observer=fn`` gets ``fn(event)`` once per decoding step it took part in,
with that request's rows only. Requests without an observer cost nothing: no event is built.
An observer that raises fails its own request only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepEvent:
    """One decoding step of one request (``I`` images, beam size ``K``, ``N`` rows evaluated).

    Before the step every live beam of image ``i`` had ``t[i]`` words. The rows evaluated are beam
    ``beam[n]`` of image ``image[n]``; ``logprobs`` are their next-word log-probs as the search saw
    them (after the hard constraints and the request's processors) and ``attention`` the step model's
    attention over the image's memory slots for them. The selection that follows: new beam ``k`` of
    image ``i`` extends old beam ``parent[i, k]`` with word ``token[i, k]`` (``token_logprob[i, k]`` its
    log-prob, ``cum[i, k]`` the new summed log-prob, ``-inf`` for a dead beam), and ``eos_cum[i, k]`` is
    the summed log-prob (EOS included) of old beam ``k`` ending here, ``-inf`` if it could not.
    ``done[i]``: image ``i``'s search has finished."""

    t: np.ndarray  # int64 [I]
    image: np.ndarray  # int64 [N]
    beam: np.ndarray  # int64 [N]
    logprobs: np.ndarray  # float64 [N, V]
    attention: np.ndarray | None  # float32 [N, M]
    parent: np.ndarray  # int64 [I, K]
    token: np.ndarray  # int64 [I, K]
    token_logprob: np.ndarray  # float64 [I, K]
    cum: np.ndarray  # float64 [I, K]
    eos_cum: np.ndarray  # float64 [I, K]
    done: np.ndarray  # bool [I]


StepObserver = Callable[[StepEvent], None]
