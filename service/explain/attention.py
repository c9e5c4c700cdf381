"""The ``attention`` method: the step model's own attention output (ONNX, every backend, no torch),
read through the engine's step observer.

- ``AttentionRecorder``: a step observer for a one-image request. It follows every beam's prefix and
  keeps the attention row that scored each prefix and the log-prob of each word added, so the maps
  behind the caption the engine finally returns — whichever beam it came from, re-ranked or not — are
  read back per word with ``maps``. Costs one small dict entry per evaluated row.
- ``ForceWords``: a logits processor that teacher-forces a caption the client supplies (every other
  word ``-inf``, the forced word keeps the model's log-prob), decoded with one beam; the recorder then
  sees exactly the steps that caption takes.

Per word w_{t+1}: the attention of the step that predicted it, float32 [T, M]."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.engine.observer import StepEvent

NEG_INF = -np.inf


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


class ForceWords:
    """Logits processor: row prefixes ``BOS w1..wt`` may only continue with ``words[t]`` (then ``eos``),
    at the model's own log-prob."""

    def __init__(self, words: Sequence[int], eos: int) -> None:
        ids = [int(w) for w in words]
        if not ids:
            raise ValueError("words must not be empty")
        if min(ids) < 0 or eos < 0:
            raise ValueError(f"words and eos must be non-negative ids, got {ids!r}, {eos}")
        self.sequence = np.array([*ids, eos], dtype=np.int64)

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        t = tokens.shape[1] - 1  # words so far
        if t >= len(self.sequence):
            raise ValueError(f"the forced caption ends after {len(self.sequence) - 1} words")
        out = np.full(logprobs.shape, NEG_INF, dtype=logprobs.dtype)
        word = self.sequence[t]
        out[:, word] = logprobs[:, word]
        return out
