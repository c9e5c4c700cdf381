"""The ``ranker_guided`` hook's ranker calls: between a step call and the beam update, the scheduler
hands this module the step's rows of the requests that ask for it, and gets their log-probs back shaped
by the ranker (``service.engine.processors``: ``guide_candidates``, ``guide_bonus``, ``apply_guide``).

Per request, ``GuideState`` keeps its images' embeddings (one ``<ranker>_image`` call, at its first
step) and the cosine each partial caption carries in its beams' scores since it was last re-scored
(keyed by its word ids, so that it follows the beams through the search's reordering). At a re-scoring
step (``RankerGuide.scores_words``: every ``every`` words) each row's ``pool`` most likely words are
re-scored; at every step each row's caption so far is scored for its end token (unless its cosine is
already known). All guided requests' partial captions of one step go to one ``<ranker>_text`` call per
ranker: images × beam_size × (pool + 1) partial captions per request at most (bounded by the hook's
validation), images × beam_size at the other steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from service.engine.processors import (
    GuideBonus,
    RankerGuide,
    apply_guide,
    cosines,
    guide_bonus,
    guide_candidates,
)
from service.engine.runner import ModelRunner

Key = tuple[int, ...]  # (image within the request, its partial caption's word ids...)


@dataclass
class GuideState:
    """One request's guided search so far (lives on its ``Request``)."""

    image_embedding: np.ndarray | None = None  # float32 [I, J], its images by the guide's ranker
    scored: dict[Key, float] = field(default_factory=dict)  # re-scored continuation → its potential
    rest: dict[Key, float] = field(default_factory=dict)  # a caption → its other continuations' potential
    cosine: dict[Key, float] = field(default_factory=dict)  # re-scored continuation → its cosine
    last: int | None = None  # words so far at the last re-scoring step
    undo: tuple[dict[Key, float], dict[Key, float], dict[Key, float], int | None] | None = None
    texts: int = 0  # partial captions the ranker embedded for this request (its cost)
    calls: int = 0  # steps at which it did

    def potential(self, key: Key) -> float:
        """What a beam of caption ``key`` carries in its score, over the weight: the cosine of its caption
        as last re-scored times that caption's length normalisation (0 before any re-scoring)."""
        if self.last is None:
            return 0.0
        head = key[: self.last + 2]  # the image, then the words up to the last re-scoring
        value = self.scored.get(head)
        return value if value is not None else self.rest.get(head[:-1], 0.0)


@dataclass
class GuidedRows:
    """One guided request's rows of a step: rows ``a .. b - 1`` of the step call, each row's image within
    the request (``image`` int64 [b - a])."""

    state: GuideState
    guide: RankerGuide
    regions: np.ndarray  # float32 [I, R, D] (or [I, 0, 0])
    images: np.ndarray  # uint8 [I, H, W, 3]
    a: int
    b: int
    image: np.ndarray
    length_penalty: float = 1.0  # the request's: score = sum log-prob / words ** length_penalty


@dataclass
class StepPlan:
    """What one request asks of its ranker at one step (``plan_rows``), then the cosines it got."""

    rows: GuidedRows
    t: int  # words so far
    keys: list[Key]  # per row: (image, words so far...)
    words: np.ndarray  # int64 [n, P] candidate words (-1: none), P = 0 when words are not re-scored
    potential: np.ndarray  # float64 [n]
    word_text: list[tuple[int, int, Key]] = field(default_factory=list)  # (row, slot, continuation)
    end_text: list[tuple[int, Key]] = field(default_factory=list)  # (row, caption) for its end token

    @property
    def captions(self) -> list[Key]:
        """The partial captions to embed, (image, word ids...) each: the candidates, then the ends."""
        return [k for _, _, k in self.word_text] + [k for _, k in self.end_text]

    def cosines(self, cosine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cosine`` [len(captions)] as (word cosines [n, P], NaN in an empty slot; prefix cosines
        [n], NaN where unknown), the end token's from the last re-scoring where it scored this very
        caption."""
        n, p = self.words.shape
        words, prefix = np.full((n, p), np.nan), np.full(n, np.nan)
        values = np.asarray(cosine, dtype=np.float64).tolist()
        if len(values) != len(self.word_text) + len(self.end_text):
            raise ValueError(f"cosine must have {len(self.captions)} values, got {len(values)}")
        for (r, s, _), c in zip(self.word_text, values, strict=False):
            words[r, s] = c
        for (r, _), c in zip(self.end_text, values[len(self.word_text) :], strict=True):
            prefix[r] = c
        scored = self.rows.state.cosine
        for r, key in enumerate(self.keys):
            if np.isnan(prefix[r]) and key in scored:
                prefix[r] = scored[key]
        return words, prefix


async def guide_step(
    runner: ModelRunner,
    requests: Sequence[GuidedRows],
    tokens: np.ndarray,
    lengths: np.ndarray,
    logprobs: np.ndarray,
    eos: int,
    decode: Callable[[list[int]], str] | None = None,
    word_ids: bool = True,
) -> np.ndarray:
    """``logprobs`` [N, V] of a step with the guided requests' rows shaped by their rankers (a new array;
    the other rows unchanged). ``tokens`` [N, T] / ``lengths`` [N]: the step's prefixes (BOS w1..wt);
    ``word_ids``/``decode``: as ``rerank.rank_finished`` (a word ranker reads a word captioner's ids,
    every other pair reads the captions' text)."""
    plans = [plan_rows(r, tokens, lengths, logprobs, eos) for r in requests]
    await _embed_images(runner, [p for p in plans if p.rows.state.image_embedding is None])
    cosine: dict[int, np.ndarray] = {}
    by_ranker: dict[str, list[StepPlan]] = {}
    for plan in plans:
        by_ranker.setdefault(_ranker(plan.rows.guide), []).append(plan)
    for name, group in by_ranker.items():
        keys = [k for plan in group for k in plan.captions]
        if not keys:
            continue
        captions = [list(k[1:]) for k in keys]
        texts = None
        if decode is not None and (not word_ids or runner.manifest.ranker(name).tokens is not None):
            texts = [decode(c) for c in captions]
        embedded = await runner.ranker_texts(name, captions, texts)
        at = 0
        for plan in group:
            image = plan.rows.state.image_embedding
            assert image is not None
            mine = plan.captions
            owner = np.asarray([k[0] for k in mine], dtype=np.int64)
            cosine[id(plan)] = cosines(embedded[at : at + len(mine)], image[owner])
            at += len(mine)
    out = np.array(logprobs)
    for plan in plans:
        out[plan.rows.a : plan.rows.b] = shape_rows(plan, logprobs, eos, cosine.get(id(plan), np.zeros(0)))
    return out


def _ranker(guide: RankerGuide) -> str:
    if guide.ranker is None:
        raise ValueError("the ranker_guided hook's ranker was not resolved to a name")
    return guide.ranker


def plan_rows(
    rows: GuidedRows, tokens: np.ndarray, lengths: np.ndarray, logprobs: np.ndarray, eos: int
) -> StepPlan:
    """Which partial captions of ``rows`` this step needs embedded (``tokens`` [N, T], ``lengths`` [N],
    ``logprobs`` [N, V]: the whole step's). A step made again (the batch changed under it) first puts
    the state back as it was before it."""
    a, b = rows.a, rows.b
    t = int(lengths[a]) - 1  # words so far (the same for every row of a request)
    image = rows.image.tolist()
    keys: list[Key] = [(image[r], *row) for r, row in enumerate(tokens[a:b, 1 : t + 1].tolist())]
    state, guide = rows.state, rows.guide
    if state.last == t and state.undo is not None:
        state.scored, state.rest, state.cosine, state.last = state.undo
        state.undo = None
    potential = np.asarray([state.potential(k) for k in keys], dtype=np.float64)
    if guide.scores_words(t):
        words = guide_candidates(logprobs[a:b], guide.pool, eos)
    else:
        words = np.zeros((b - a, 0), dtype=np.int64)
    plan = StepPlan(rows, t, keys, words, potential)
    for r, key in enumerate(keys):
        for slot, word in enumerate(words[r].tolist()):
            if word >= 0:
                plan.word_text.append((r, slot, (*key, word)))
    ends = np.isfinite(logprobs[a:b, eos])
    for r, key in enumerate(keys):  # a caption's cosine for its end token, unless just re-scored
        if t and ends[r] and key not in state.cosine:
            plan.end_text.append((r, key))
    return plan


def shape_rows(plan: StepPlan, logprobs: np.ndarray, eos: int, cosine: np.ndarray) -> np.ndarray:
    """The plan's rows of ``logprobs`` [N, V] shaped (a new [b - a, V] array) given ``cosine``
    [len(plan.captions)], the ranker's cosine of each of ``plan.captions`` with its image; the state
    then remembers what each continuation carries."""
    a, b = plan.rows.a, plan.rows.b
    word_cosine, prefix_cosine = plan.cosines(cosine)
    lp = plan.rows.length_penalty
    now, after = float(max(plan.t, 1)) ** lp, float(plan.t + 1) ** lp
    bonus = guide_bonus(word_cosine, prefix_cosine, plan.potential, plan.rows.guide.weight, now, after)
    out = apply_guide(logprobs[a:b], plan.words, bonus, eos)
    state = plan.rows.state
    if plan.captions:
        state.texts += len(plan.captions)
        state.calls += 1
    _remember(plan, bonus, word_cosine)
    return out


def _remember(plan: StepPlan, bonus: GuideBonus, word_cosine: np.ndarray) -> None:
    """After a re-scoring step: what each continuation now carries, and the cosines of the re-scored
    ones (the older entries are no longer read: every live beam's caption was re-scored at this step)."""
    if not plan.words.shape[1]:
        return
    state = plan.rows.state
    scored: dict[Key, float] = {}
    rest: dict[Key, float] = {}
    cosine: dict[Key, float] = {}
    for r, key in enumerate(plan.keys):
        rest[key] = float(bonus.rest_potential[r])
        for s, word in enumerate(plan.words[r].tolist()):
            if word >= 0:
                scored[(*key, word)] = float(bonus.word_potential[r, s])
                cosine[(*key, word)] = float(word_cosine[r, s])
    state.undo = (state.scored, state.rest, state.cosine, state.last)
    state.scored, state.rest, state.cosine, state.last = scored, rest, cosine, plan.t


async def _embed_images(runner: ModelRunner, plans: Sequence[StepPlan]) -> None:
    """Each request's images embedded once, one call per ranker for the requests that start now."""
    by_ranker: dict[str, list[StepPlan]] = {}
    for plan in plans:
        by_ranker.setdefault(_ranker(plan.rows.guide), []).append(plan)
    for name, group in by_ranker.items():
        regions = np.concatenate([p.rows.regions for p in group])
        images = np.concatenate([p.rows.images for p in group])
        embedded = await runner.ranker_images(name, regions, images)
        at = 0
        for plan in group:
            k = plan.rows.images.shape[0]
            plan.rows.state.image_embedding = embedded[at : at + k]
            at += k


__all__ = ["GuideState", "GuidedRows", "StepPlan", "guide_step", "plan_rows", "shape_rows"]
