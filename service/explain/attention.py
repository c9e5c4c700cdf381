"""The ``attention`` method: the step model's own attention output (ONNX, every backend, no torch),
read through the engine's step observer.

- ``AttentionRecorder``: a step observer for a one-image request. It follows every beam's prefix and
  keeps the attention row that scored each prefix and the log-prob of each word added, so the maps
  behind the caption the engine finally returns — whichever beam it came from, re-ranked or not — are
  read back per word with ``maps``. Costs one small dict entry per evaluated row.
- a caption the client supplies is decoded with one beam under the ``force_words`` hook
  (``service.engine.processors.ForceWords``: every other word ``-inf``, the forced word keeps the
  model's log-prob); the recorder then sees exactly the steps that caption takes.

Per word w_{t+1}: the attention of the step that predicted it, float32 [T, M]."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.engine.observer import StepEvent


class AttentionRecorder:
    """Observer of a one-image request: prefix (word ids) → attention row [M] of the step that
    extended it, and → log-prob of its last word."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, ...], np.ndarray] = {}
        self.logprob: dict[tuple[int, ...], float] = {}
        self._prefix: dict[int, tuple[int, ...]] = {}
        self.missing = False  # the step model returned no attention

    def __call__(self, event: StepEvent) -> None:
        if event.attention is None:
            self.missing = True
        else:
            for n in np.flatnonzero(event.image == 0):
                prefix = self._prefix.get(int(event.beam[n]), ())
                self.rows.setdefault(prefix, np.asarray(event.attention[n], dtype=np.float32))
        prefixes = {}
        for k in range(event.token.shape[1]):
            if np.isfinite(event.cum[0, k]):
                prefix = (*self._prefix.get(int(event.parent[0, k]), ()), int(event.token[0, k]))
                prefixes[k] = prefix
                self.logprob.setdefault(prefix, float(event.token_logprob[0, k]))
        self._prefix = prefixes

    def maps(self, words: Sequence[int]) -> np.ndarray | None:
        """Attention [T, M] behind each of ``words`` (ids, no BOS/EOS); None if a prefix was not seen."""
        rows = [self.rows.get(tuple(words[:t])) for t in range(len(words))]
        if not rows or any(r is None for r in rows):
            return None
        return np.stack(rows)  # type: ignore[arg-type]

    def word_logprobs(self, words: Sequence[int]) -> list[float | None]:
        """The log-prob the model gave each of ``words`` where the search extended that prefix."""
        return [self.logprob.get(tuple(words[: t + 1])) for t in range(len(words))]
