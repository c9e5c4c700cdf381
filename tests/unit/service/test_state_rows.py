"""``pooled_feed``: a v3 step's state inputs; with no pool, the new states are the pool (the contract
asks a call with rows to have a pool of at least one row), naming the same rows by the same indices."""

from __future__ import annotations

import numpy as np

from service.engine.state_rows import StateRows, pooled_feed, state_feed


def _rows_named(feed: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([feed["state"], feed["state_new"]])[feed["state_index"]]


def test_the_first_call_passes_its_new_states_as_the_pool() -> None:
    new = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = StateRows(np.zeros((0, 4), np.float32), new, np.array([2, 0, 0, 1]))
    feed = pooled_feed(rows)
    assert feed["state"] is new and feed["state_new"].shape == (0, 4)
    np.testing.assert_array_equal(_rows_named(feed), rows.host())


def test_a_pool_is_passed_as_it_is() -> None:
    pool = np.ones((2, 4), np.float32)
    new = np.zeros((1, 4), np.float32)
    rows = StateRows(pool, new, np.array([2, 1, 0]))
    feed = pooled_feed(rows)
    assert feed["state"] is pool and feed["state_new"] is new
    np.testing.assert_array_equal(_rows_named(feed), rows.host())
    empty = StateRows(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
    assert pooled_feed(empty)["state"].shape == (0, 4)  # no rows: nothing to pool


def test_host_states_fed_to_a_v3_step() -> None:
    state = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    feed = state_feed(state, gathers=True)
    assert feed["state"].shape == (3, 5) and feed["state_new"].shape == (0, 5)
    np.testing.assert_array_equal(_rows_named(feed), state)
    assert state_feed(state, gathers=False) == {"state": state}
