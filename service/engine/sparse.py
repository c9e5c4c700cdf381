"""What beam search needs of a step's log-probabilities when no request reads the whole distribution:
each row's ``k`` best tokens and its end token's log-prob (``RowTopK``), instead of all ``V``.

Why it is exact: beam search keeps, per image, the ``K`` best non-end continuations over its ``K`` beams
× ``V`` words. A word outside its own row's ``K`` best non-end, non-banned words has ``K`` better
continuations in that row alone, so it can never be chosen; with ``k = K + 1 + banned`` per row (room
for the end token and the banned words among the best) the selection is the one the whole distribution
gives, up to exact ties at the boundary. A request with decoding hooks, an observer (probes,
explanations) or diverse groups reads whole rows: the engine then fetches them whole
(``BeamBatch.advance`` refuses a ``RowTopK`` for such a batch).

With a vocabulary of real size (GPT-2: 50 257 words) the whole rows cost: 640 rows × 50 257 floats
are 129 MB per step to copy off a GPU, and the beam batch's float64 working copies as much again
twice. The step graph can compute the top ``k`` itself (``top_logprobs``, ``top_tokens``,
``eos_logprob`` outputs and a ``top_k`` input, added by ``export.packaging.topk``); for a step without
them the runner takes them on the host (``row_top_k``), which still spares the beam batch its [N, V]
arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.checks import at_least, within
from service.engine.beam import NEG_INF

# below this vocabulary size the whole rows are as cheap as their top k (the shipped SceneWorld models
# have a few hundred words): they are read whole, as before
SPARSE_MIN_VOCAB = 4096


@dataclass(frozen=True)
class RowTopK:
    """The ``k`` best next tokens of each of ``N`` rows (in any order) and each row's end-token log-prob;
    ``vocab``: the step's ``V``."""

    logprobs: np.ndarray  # float32 [N, k]
    tokens: np.ndarray  # int64 [N, k]
    eos: np.ndarray  # float32 [N]
    vocab: int

    def __post_init__(self) -> None:
        if self.logprobs.ndim != 2 or self.tokens.shape != self.logprobs.shape:
            raise ValueError(
                f"logprobs and tokens must both be [N, k], got {self.logprobs.shape} and {self.tokens.shape}"
            )
        if self.eos.shape != (self.logprobs.shape[0],):
            raise ValueError(f"eos must have shape [{self.logprobs.shape[0]}], got {self.eos.shape}")

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, V)``: the shape of the rows it stands for."""
        return int(self.logprobs.shape[0]), self.vocab

    @property
    def ndim(self) -> int:
        return 2

    def __getitem__(self, rows: slice) -> RowTopK:
        """The rows ``rows`` (a slice), as a ``RowTopK`` of the same vocabulary."""
        return RowTopK(self.logprobs[rows], self.tokens[rows], self.eos[rows], self.vocab)


def top_k_for(beam_capacity: int, banned: int) -> int:
    """The ``k`` a step must return per row for beams of up to ``beam_capacity`` with ``banned`` words
    never chosen: ``beam_capacity + 1 + banned`` (see module docstring)."""
    at_least(1, beam_capacity=beam_capacity)
    at_least(0, banned=banned)
    return beam_capacity + 1 + banned


def row_top_k(logprobs: np.ndarray, k: int, eos: int) -> RowTopK:
    """``logprobs`` float [N, V] → its rows' ``k`` best tokens (unordered) and end-token log-probs. Pure."""
    n, v = logprobs.shape
    within(1, v, k=k)
    top = np.argpartition(logprobs, v - k, axis=1)[:, v - k :] if k < v else np.tile(np.arange(v), (n, 1))
    grid = np.arange(n)[:, None]
    values = np.asarray(logprobs[grid, top], dtype=np.float32)
    return RowTopK(values, top.astype(np.int64), np.asarray(logprobs[:, eos], dtype=np.float32), v)


def compact(top: RowTopK, eos: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``top`` as ``k + 1`` candidates each: (float64 [N, k + 1] log-probs, int64 [N, k + 1]
    the word of each), the last column the end token's and the end token's place among the best
    ``-inf`` (it is the last column's). Beam search on it — the end token at column ``k`` — selects the
    words it selects on whole rows (module docstring), in O(N k) instead of O(N V). Pure."""
    n, k = top.logprobs.shape
    values = np.empty((n, k + 1))
    values[:, :k] = top.logprobs
    values[:, k] = top.eos
    words = np.empty((n, k + 1), dtype=np.int64)
    words[:, :k] = top.tokens
    words[:, k] = eos
    values[:, :k][top.tokens == eos] = NEG_INF
    return values, words


__all__ = ["SPARSE_MIN_VOCAB", "RowTopK", "compact", "row_top_k", "top_k_for"]
