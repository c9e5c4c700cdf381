"""``BeamBatch`` (all requests in one set of arrays) equals the reference oracle (``tests/beam_oracle.py``)
run per request, token for token, with requests joining at different steps, different beam sizes,
lengths, length penalties, processors and diverse (grouped) searches — on the toy prefix-conditioned
model of ``test_beam``. A failing processor or observer fails its own request only; observers get
their own request's steps, and nothing is built for requests without one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import service.engine.beam_batch as beam_batch_module
from service.backends.base import DeviceArray
from service.engine.beam import Hypothesis
from service.engine.beam_batch import BeamBatch, Joining, StepUpdate
from service.engine.cohorts import CohortBatch
from service.engine.observer import StepEvent, StepObserver
from service.engine.params import SearchParams
from service.engine.processors import BanWords, NoRepeatNgram, SynonymSubstitution
from tests.beam_oracle import BeamSearch
from tests.unit.engine.test_beam import BANNED, BOS, EOS, WORDS, V, compose, model_logprob, toy_logprobs

M = 3  # memory slots of the toy model: slot 0 carries the toy image id
S = 2  # state width


def toy_step(image_ids: np.ndarray, tokens: np.ndarray, lengths: np.ndarray, state: np.ndarray) -> tuple:
    rows = [
        toy_logprobs(int(image_ids[n]), tuple(int(x) for x in tokens[n, 1 : lengths[n]]))
        for n in range(tokens.shape[0])
    ]
    return (np.stack(rows) if rows else np.zeros((0, V), np.float32)), state + 1.0


def params(**kw: Any) -> SearchParams:
    return SearchParams(model="toy", **kw)


def solo(image_ids: list[int], p: SearchParams) -> tuple[list[list[Hypothesis]], int]:
    """The oracle on one request alone: its results and the number of steps it took."""
    search = BeamSearch(
        n_images=len(image_ids),
        beam_size=p.beam_size,
        max_length=p.max_length,
        bos=BOS,
        eos=EOS,
        initial_state=np.zeros((len(image_ids), S), np.float32),
        length_penalty=p.length_penalty,
        banned_ids=BANNED,
        min_length=p.min_length,
        logits_hook=compose(p.processors) if p.processors else None,
        groups=p.groups,
        diversity_penalty=p.diversity_penalty,
    )
    ids = np.asarray(image_ids)
    while not search.finished:
        r = search.rows()
        logprobs, state = toy_step(ids[r.image_index], r.tokens, r.lengths, r.state)
        search.advance(r, logprobs, state)
    return search.results(p.n_best), search.steps


def joining(key: int, ids: list[int], p: SearchParams, observer: StepObserver | None = None) -> Joining:
    memory = np.zeros((len(ids), M, 1), np.float32)
    memory[:, 0, 0] = ids  # carries the toy image id
    return Joining(key, memory, prefix_state(np.asarray(ids), np.zeros((len(ids), 0), np.int64)), p, observer)


def prefix_state(images: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """[N, S]: a state that names its row's image and the tokens it has read (exact in float32)."""
    weights = np.arange(1, tokens.shape[1] + 1)
    return np.stack([images, ((tokens + 1) * weights).sum(axis=1)], axis=1).astype(np.float32)


def unreadable() -> np.ndarray:
    raise AssertionError("the batch read a state it should only refer to")


def checked_state(images: np.ndarray, rows: Any) -> DeviceArray:
    """The toy step's state_out for ``rows`` (``BatchRows``), after checking that every row got the
    state of its own image and prefix (what it read before its last token): the batch's references
    into the last state_out and the new images' initial states must follow every reorder, join and
    departure. Returned as a device output the batch must not read."""
    pool = rows.state.pool.value if isinstance(rows.state.pool, DeviceArray) else rows.state.pool
    got = np.concatenate([pool, rows.state.new])[rows.state.index]
    read = [rows.tokens[n, : rows.lengths[n] - 1] for n in range(rows.rows.shape[0])]
    width = max((len(x) for x in read), default=0)
    before = np.stack([np.pad(x, (0, width - len(x)), constant_values=-1) for x in read]) if read else None
    want = prefix_state(images, before) if before is not None else np.zeros((0, S), np.float32)
    np.testing.assert_array_equal(got, want)
    after = np.where(np.arange(rows.tokens.shape[1])[None, :] < rows.lengths[:, None], rows.tokens, -1)
    out = prefix_state(images, after)
    return DeviceArray(out, out.shape, unreadable)


@dataclass
class Drive:
    """What driving a batch to the end gave: per request its results (or failure) and its steps."""

    results: dict[int, list[list[Hypothesis]]] = field(default_factory=dict)
    failed: dict[int, Exception] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)
    widths: list[int] = field(default_factory=list)  # rows per step call


def drive(
    requests: Sequence[tuple[int, list[int], SearchParams]],
    capacity: int = 6,
    length_capacity: int = 6,
    observers: dict[int, StepObserver] | None = None,
    on_update: Callable[[BeamBatch, StepUpdate], None] | None = None,
    cohorts: Sequence[int] | None = None,
) -> Drive:
    """Run ``requests`` ((join at step, toy image ids, params), key = position) through one batch,
    with an attention [N, M] per row that says which row it is: (toy image id, t, beam column).
    ``cohorts``: a ``CohortBatch`` with these bounds instead (the beam column is then not known: 0)."""
    batch: Any = BeamBatch(
        beam_capacity=capacity, length_capacity=length_capacity, bos=BOS, eos=EOS, banned_ids=BANNED
    )
    if cohorts is not None:
        batch = CohortBatch(capacity, length_capacity, BOS, EOS, BANNED, cohorts)
    out = Drive()
    pending = dict(enumerate(requests))
    step = 0
    while pending or batch.keys:
        now = [key for key, (join, _, _) in pending.items() if join <= step]
        batch.add_many(
            [joining(key, pending[key][1], pending[key][2], (observers or {}).get(key)) for key in now]
        )
        for key in now:
            del pending[key]
        step += 1
        if not batch.keys:
            continue
        assert batch.memory is not None
        images = batch.memory[:, 0, 0].astype(np.int64)
        r = batch.rows()
        out.widths.append(int(r.rows.shape[0]))
        logprobs, _ = toy_step(images[r.image_index], r.tokens, r.lengths, np.zeros((0, S)))
        state = checked_state(images[r.image_index], r)
        column = r.rows % batch.capacity if cohorts is None else np.zeros_like(r.rows)
        attention = np.stack([images[r.image_index], r.lengths - 1, column], axis=1).astype(np.float32)
        update = batch.advance(r, logprobs, state, attention)
        if on_update is not None:
            on_update(batch, update)
        assert not set(update.finished) & set(update.failed)
        for key in update.finished:
            out.steps[key] = batch.steps[key]
            out.results[key] = batch.results(key, requests[key][2].n_best)
        for key, exc in update.failed.items():
            out.steps[key] = batch.steps[key]
            out.failed[key] = exc
        batch.discard(*update.finished, *update.failed)
    assert batch.n_images == 0 and batch.memory is None
    return out


def assert_equal_to_oracle(got: list[list[Hypothesis]], ids: list[int], p: SearchParams, steps: int) -> None:
    want, want_steps = solo(ids, p)
    assert [[h.tokens for h in per] for per in got] == [[h.tokens for h in per] for per in want]
    assert got == [
        [Hypothesis(h.tokens, pytest.approx(h.logprob), pytest.approx(h.score)) for h in per]  # type: ignore[arg-type]
        for per in want
    ]
    assert steps == want_steps


def reenable(tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
    """A rogue processor: gives the banned ids and EOS log-prob 0, which the hard constraints must undo
    (banned ids always, EOS before min_length words) after it."""
    out = np.array(logprobs)
    out[:, [*BANNED, EOS]] = 0.0
    return out


REQUESTS = [  # (join at step, toy image ids, params)
    (0, [0, 1], params(beam_size=3, max_length=4, n_best=3)),
    (0, [2], params(beam_size=1, max_length=5, n_best=1)),
    (1, [3, 4, 5], params(beam_size=5, max_length=3, n_best=2, length_penalty=0.0)),
    (2, [6], params(beam_size=4, max_length=6, n_best=4, min_length=3)),
    (2, [7], params(beam_size=4, max_length=5, n_best=4, processors=(BanWords([5]),))),
    (4, [8, 9], params(beam_size=2, max_length=6, n_best=2, length_penalty=2.0)),
    (5, [10], params(beam_size=5, max_length=6, n_best=5, processors=(NoRepeatNgram(1),))),
    (5, [25, 40], params(beam_size=3, max_length=4, n_best=3, min_length=0)),  # the empty caption
    (3, [26, 27], params(beam_size=3, max_length=5, n_best=3, min_length=2, processors=(reenable,))),
]

DIVERSE = [  # diverse requests mixed with plain ones of other widths, and requests with several processors
    (0, [11, 12], params(beam_size=4, n_best=4, max_length=5, groups=2, diversity_penalty=0.5)),
    (0, [13], params(beam_size=3, n_best=2, max_length=4)),
    (1, [14], params(beam_size=6, n_best=6, max_length=6, groups=3, diversity_penalty=2.0)),
    (1, [15, 16], params(beam_size=4, n_best=3, max_length=4, groups=4, length_penalty=0.5)),  # penalty 0
    (2, [17], params(beam_size=4, n_best=4, max_length=5, groups=2, diversity_penalty=0.5)),  # same config
    (2, [18], params(beam_size=5, n_best=5, max_length=6, processors=(BanWords([4]), NoRepeatNgram(2)))),
    (
        3,
        [19, 20],
        params(
            beam_size=6,
            n_best=4,
            max_length=6,
            min_length=2,
            groups=2,
            diversity_penalty=1.0,
            processors=(NoRepeatNgram(2), SynonymSubstitution({6: 5})),
        ),
    ),
    (3, [21], params(beam_size=1, n_best=1, max_length=3)),
    (4, [22], params(beam_size=2, n_best=2, max_length=6, groups=2, diversity_penalty=3.0, min_length=4)),
]


@pytest.mark.parametrize("requests", [REQUESTS, DIVERSE, REQUESTS + DIVERSE], ids=["plain", "diverse", "all"])
def test_batch_equals_each_request_alone(requests: list[tuple[int, list[int], SearchParams]]) -> None:
    done = drive(requests)
    assert not done.failed
    assert sorted(done.results) == list(range(len(requests)))
    for key, (_, ids, p) in enumerate(requests):
        assert_equal_to_oracle(done.results[key], ids, p, done.steps[key])
        for per in done.results[key]:
            assert len(per) == p.n_best
            assert all(
                set(h.tokens) <= set(WORDS) and p.min_length <= len(h.tokens) <= p.max_length for h in per
            )
    assert max(done.widths) > max(p.beam_size * len(ids) for _, ids, p in requests)  # requests shared steps


@pytest.mark.parametrize("bounds", [(2, 4), (1, 3, 5), ()], ids=["2-4", "1-3-5", "one"])
def test_cohorts_equal_one_batch(bounds: tuple[int, ...]) -> None:
    """Requests split by beam width into cohorts fed by one step call decode exactly as in one batch (and
    so as each alone), share every step call, and each cohort is only as wide as its own requests."""
    requests = REQUESTS + DIVERSE
    one = drive(requests)
    widths: list[list[int]] = []

    def record(batch: CohortBatch, update: StepUpdate) -> None:
        widths.append([c.capacity for c in batch.cohorts if c.n_images])

    split = drive(requests, cohorts=bounds, on_update=record)  # type: ignore[arg-type]
    assert not split.failed and split.steps == one.steps and split.widths == one.widths
    for key in one.results:
        assert split.results[key] == one.results[key]
    if bounds:
        assert any(len(w) > 1 for w in widths)  # cohorts really ran side by side in one step call
        assert any(min(w) < max(w) for w in widths)  # ... at different widths


def test_a_cohort_is_as_wide_as_its_widest_request() -> None:
    batch = CohortBatch(100, 4, BOS, EOS, BANNED)
    batch.add_many([joining(1, [0], params(beam_size=5, n_best=1, max_length=4))])
    batch.add_many([joining(2, [1], params(beam_size=100, n_best=1, max_length=4))])
    assert [c.capacity for c in batch.cohorts] == [5, 1, 100] and batch.n_images == 2
    r = batch.rows()
    assert r.image_index.tolist() == [0, 1] and batch.memory is not None and batch.memory.shape[0] == 2
    batch.discard(2)
    assert [c.capacity for c in batch.cohorts] == [5, 1, 1] and batch.keys == [1]
    with pytest.raises(ValueError, match="beam_size must be <= 100"):
        batch.add_many([joining(3, [2], params(beam_size=101, n_best=1, max_length=4))])
    with pytest.raises(ValueError, match="bounds"):
        CohortBatch(10, 4, BOS, EOS, BANNED, (8, 4))


def test_the_requests_exercise_what_they_claim() -> None:
    # the grouped requests above do differ from their plain version (else their check proves little)
    for _, ids, p in DIVERSE:
        if p.groups > 1 and p.diversity_penalty > 0:
            plain = dataclasses.replace(p, groups=1, diversity_penalty=0.0)
            assert solo(ids, p)[0] != solo(ids, plain)[0]
    synonym = DIVERSE[6][2].processors[1]
    assert isinstance(synonym, SynonymSubstitution) and synonym.substitutions > 0
    (ids, p) = next((ids, p) for _, ids, p in REQUESTS if p.min_length == 0)
    empty = solo(ids, p)[0]
    assert all([] in [h.tokens for h in per] for per in empty)  # min_length 0 lets EOS come first


def test_rows_carry_each_request_prefix_and_discard_frees_images() -> None:
    batch = BeamBatch(beam_capacity=3, length_capacity=4, bos=BOS, eos=EOS, banned_ids=BANNED)
    batch.add_many([joining(1, [0, 1], params(beam_size=3, n_best=3, max_length=4))])
    r = batch.rows()
    assert r.rows.tolist() == [0, 3] and r.tokens.tolist() == [[BOS], [BOS]]
    batch.advance(r, np.stack([toy_logprobs(0, ()), toy_logprobs(1, ())]), r.state.host())
    batch.add_many([joining(2, [1], params(beam_size=2, n_best=2, max_length=4))])
    r = batch.rows()
    assert r.lengths.tolist() == [2] * 6 + [1]  # request 1 at step 1 (3 beams x 2 images), request 2 new
    assert r.tokens.shape == (7, 2) and r.tokens[-1].tolist() == [BOS, 0]
    batch.discard(1)
    assert batch.n_images == 1 and batch.memory is not None and batch.memory.shape[0] == 1
    assert batch.keys == [2] and batch.capacity == 2  # the batch narrows to its widest request
    with pytest.raises(KeyError):
        batch.results(1, 1)
    with pytest.raises(ValueError, match="beam_size"):
        batch.add_many([joining(3, [0], params(beam_size=4, n_best=1, max_length=2))])
    with pytest.raises(ValueError, match="max_length"):
        batch.add_many([joining(3, [0], params(beam_size=2, n_best=1, max_length=5))])
    with pytest.raises(ValueError, match="already"):
        batch.add_many([joining(2, [0], params(beam_size=2, n_best=1, max_length=2))])
    with pytest.raises(ValueError, match="unique"):
        batch.add_many(
            [
                joining(4, [0], params(beam_size=2, n_best=1, max_length=2)),
                joining(4, [1], params(beam_size=2, n_best=1, max_length=2)),
            ]
        )
    assert batch.keys == [2] and batch.n_images == 1  # refused joins leave the batch as it was


# -------------------------------------------------------------------------------------------- failures
class Boom(RuntimeError):
    pass


class FailsAt:
    """A processor that raises on its ``at``-th call (0-based); until then it bans word 6."""

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def __call__(self, tokens: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
        self.calls += 1
        if self.calls > self.at:
            raise Boom(f"call {self.calls}")
        return BanWords([6])(tokens, logprobs)


def test_a_failing_processor_fails_only_its_own_request() -> None:
    bad = FailsAt(2)
    requests = [
        (0, [0, 1], params(beam_size=3, n_best=3, max_length=5)),
        (0, [2], params(beam_size=4, n_best=2, max_length=5, processors=(NoRepeatNgram(2), bad))),
        (1, [3], params(beam_size=4, n_best=4, max_length=6, groups=2, diversity_penalty=1.0)),
        (1, [4], params(beam_size=2, n_best=2, max_length=4, processors=(BanWords([4]),))),
    ]
    updates: list[StepUpdate] = []
    done = drive(requests, on_update=lambda _, u: updates.append(u))
    assert list(done.failed) == [1] and isinstance(done.failed[1], Boom)
    assert bad.calls == 3  # it failed at its third step and was not called again
    assert [u.failed for u in updates].count({1: done.failed[1]}) == 1
    assert sorted(done.results) == [0, 2, 3]
    for key in (0, 2, 3):
        _, ids, p = requests[key]
        assert_equal_to_oracle(done.results[key], ids, p, done.steps[key])


def test_a_failing_observer_fails_only_its_own_request() -> None:
    seen: list[int] = []

    def observer(event: StepEvent) -> None:
        seen.append(int(event.t[0]))
        if len(seen) == 2:
            raise Boom("observer")

    requests = [
        (0, [5], params(beam_size=3, n_best=3, max_length=5)),
        (0, [6, 7], params(beam_size=2, n_best=2, max_length=5)),
    ]
    done = drive(requests, observers={1: observer})
    assert list(done.failed) == [1] and isinstance(done.failed[1], Boom) and seen == [0, 1]
    assert_equal_to_oracle(done.results[0], [5], requests[0][2], done.steps[0])


# -------------------------------------------------------------------------------------------- observers
def chain(events: list[StepEvent], step: int, image: int, beam: int) -> list[int]:
    """The words of beam ``beam`` of ``image`` after ``step`` steps, from the events' ``token`` /
    ``parent`` alone."""
    words: list[int] = []
    for e in reversed(events[:step]):
        words.append(int(e.token[image, beam]))
        beam = int(e.parent[image, beam])
    return words[::-1]


def backtrack(events: list[StepEvent], image: int, hyp: Hypothesis) -> list[list[int]]:
    """Candidates for the words of finished hypothesis ``hyp`` of ``image``, rebuilt from the events: it
    ended (EOS) at the step whose ``t`` is its length, from an old beam whose ``eos_cum`` is its
    log-prob (that beam's ``cum`` plus its row's EOS log-prob); ``token`` / ``parent`` lead back."""
    length = len(hyp.tokens)
    (end,) = [s for s, e in enumerate(events) if int(e.t[image]) == length]
    eos_cum = events[end].eos_cum[image]
    out = []
    for beam in np.flatnonzero(np.isclose(eos_cum, hyp.logprob, rtol=0, atol=1e-9)).tolist():
        (row,) = np.flatnonzero((events[end].image == image) & (events[end].beam == beam))
        before = events[end - 1].cum[image, beam]
        assert eos_cum[beam] == pytest.approx(before + events[end].logprobs[row, EOS], abs=1e-9)
        out.append(chain(events, end, image, beam))
    return out


def test_observers_get_their_own_requests_steps_and_rebuild_the_top_caption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[StepEvent] = []

    def counted(**fields: Any) -> StepEvent:
        built.append(StepEvent(**fields))
        return built[-1]

    monkeypatch.setattr(beam_batch_module, "StepEvent", counted)
    requests = [
        (0, [0, 1], params(beam_size=3, n_best=3, max_length=5)),  # observed
        (0, [2], params(beam_size=4, n_best=4, max_length=6)),  # not observed
        (1, [3, 4, 5], params(beam_size=4, n_best=2, max_length=6, groups=2, diversity_penalty=1.0)),
        (2, [6], params(beam_size=2, n_best=2, max_length=4, min_length=2, processors=(BanWords([4]),))),
    ]
    events: dict[int, list[StepEvent]] = {0: [], 2: [], 3: []}
    observers: dict[int, StepObserver] = {key: got.append for key, got in events.items()}
    done = drive(requests, observers=observers)
    assert not done.failed
    assert len(built) == sum(len(e) for e in events.values())  # none for the request without observer
    for key, got in events.items():
        _, ids, p = requests[key]
        assert_equal_to_oracle(done.results[key], ids, p, done.steps[key])
        assert len(got) == done.steps[key]  # one event per step the request took part in
        n_img, k = len(ids), p.beam_size
        for step, e in enumerate(got):
            n = e.image.shape[0]
            assert e.t.shape == (n_img,) and e.done.shape == (n_img,) and e.done.dtype == bool
            assert e.image.shape == e.beam.shape == (n,) and n >= 1
            assert e.logprobs.shape == (n, V)
            assert e.attention is not None and e.attention.shape == (n, M)
            for name in ("parent", "token", "token_logprob", "cum", "eos_cum"):
                assert getattr(e, name).shape == (n_img, k), name
            live = ~got[step - 1].done if step else np.ones(n_img, dtype=bool)
            assert (e.t[live] == step).all()
            assert sorted(set(e.image.tolist())) == np.flatnonzero(live).tolist()
            assert ((e.beam >= 0) & (e.beam < k)).all()
            # the rows are this request's: the attention row says (toy image id, t, beam column)
            np.testing.assert_array_equal(e.attention[:, 0], np.asarray(ids)[e.image])
            np.testing.assert_array_equal(e.attention[:, 1], e.t[e.image])
            np.testing.assert_array_equal(e.attention[:, 2], e.beam)
            # each row's log-probs are the model's for its prefix, as the search saw them (constraints
            # and the request's processors applied)
            for row in range(n):
                i, b = int(e.image[row]), int(e.beam[row])
                prefix = chain(got, step, i, b)
                want = toy_logprobs(ids[i], tuple(prefix))[None].astype(np.float64)
                want[:, list(BANNED)] = -np.inf
                if step < p.min_length:
                    want[:, EOS] = -np.inf
                if step >= p.max_length:
                    want[:, [w for w in range(V) if w != EOS]] = -np.inf
                want = compose(p.processors)(np.asarray([[BOS, *prefix]]), want)
                np.testing.assert_array_equal(e.logprobs[row], want[0])
            # cum follows the parents and adds token_logprob
            if step:
                prev = got[step - 1]
                for i in np.flatnonzero(live):
                    alive = np.isfinite(e.cum[i])
                    assert alive.any() or e.done[i]
                    expect = prev.cum[i, e.parent[i]] + e.token_logprob[i]
                    np.testing.assert_allclose(e.cum[i][alive], expect[alive], rtol=1e-12)
        assert got[-1].done.all() and not any(e.done.all() for e in got[:-1])
        for i, per in enumerate(done.results[key]):
            top = per[0]
            assert top.tokens in backtrack(got, i, top)
            assert top.logprob == pytest.approx(model_logprob(ids[i], top.tokens), rel=1e-6)
