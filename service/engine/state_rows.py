"""The decoder state of a step call's rows, by reference (model contract v3).

Beam search reorders its rows every step: a surviving beam continues from its parent's state. Until
contract v3 the engine did the reorder on the host — every step copied the ``[N, S]`` state down from
the model's device, gathered it by parent and copied it up again (2 MB each way at 640 rows of the
shipped LSTMs; for a key/value-cache step, the whole cache). Now a row's state is named, not copied:
``StateRows`` says which row of the previous step call's ``state_out`` (``pool``, kept as the backend
returned it, on the device where the backend keeps it) or of the initial states of images new to
this call (``new``) each row continues from. A v3 step graph (an input named ``state_index``) gathers
``concat(state, state_new)[state_index]`` itself, on its device; for an older graph the runner gathers
on the host (``host``), as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.backends.base import host_array


@dataclass(frozen=True, eq=False)
class StateRows:
    """Row ``n``'s state is row ``index[n]`` of ``concat(pool, new)``."""

    pool: Any  # float32 [P, S]: the previous step call's state_out (np.ndarray or a backend DeviceArray)
    new: np.ndarray  # float32 [J, S]: initial states of images new to this call
    index: np.ndarray  # int64 [N]

    def __post_init__(self) -> None:
        if self.index.ndim != 1:
            raise ValueError(f"index must be 1-D, got shape {self.index.shape}")
        if self.new.ndim != 2:
            raise ValueError(f"new must be [J, S], got shape {self.new.shape}")
        if self.pool.shape[1:] != self.new.shape[1:]:
            raise ValueError(f"pool {self.pool.shape} and new {self.new.shape} differ in state width")
        total = self.pool.shape[0] + self.new.shape[0]
        if self.index.size and (int(self.index.min()) < 0 or int(self.index.max()) >= total):
            raise ValueError(f"index must point into the {total} pooled rows")

    @property
    def width(self) -> int:
        """``S``."""
        return int(self.new.shape[1])

    def host(self) -> np.ndarray:
        """float32 [N, S] on the host (copies a pool kept on a device)."""
        pool = host_array(self.pool)
        if not pool.shape[0]:
            return self.new[self.index]
        if not self.new.shape[0]:
            return pool[self.index]
        return np.concatenate([pool, self.new])[self.index]


def state_rows(state: np.ndarray) -> StateRows:
    """``state`` [N, S] on the host as ``StateRows`` (every row new, in order)."""
    state = np.ascontiguousarray(state, dtype=np.float32)
    empty = np.zeros((0, state.shape[1]), dtype=np.float32)
    return StateRows(empty, state, np.arange(state.shape[0], dtype=np.int64))


def pooled_feed(rows: StateRows) -> dict[str, Any]:
    """A v3 step's ``state``, ``state_new`` and ``state_index`` for ``rows``: with no pool (the first
    call), the new states are passed as the pool and none as new — the same ``concat(state,
    state_new)``, so the same indices — as the contract asks (``export.models.step_contract``)."""
    if rows.pool.shape[0] or not rows.new.shape[0]:
        return {"state": rows.pool, "state_new": rows.new, "state_index": rows.index}
    return {"state": rows.new, "state_new": rows.new[:0], "state_index": rows.index}


def state_feed(state: np.ndarray, gathers: bool) -> dict[str, np.ndarray]:
    """A step's state inputs for rows whose states are ``state`` [N, S] on the host: ``state`` itself
    for a step before v3, else as new states in order (``state``, ``state_new``, ``state_index``)."""
    if not gathers:
        return {"state": state}
    return pooled_feed(state_rows(state))


__all__ = ["StateRows", "pooled_feed", "state_feed", "state_rows"]
