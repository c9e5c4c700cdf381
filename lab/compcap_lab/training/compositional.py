"""A compositional ranker: VSE++ (``export.models.vsepp``, served exactly as the zoo's VSE++) trained with
SceneWorld's counterfactual hard negatives, so that it learns to tell "a black cat" from "a white cat".

Each training pair (image, caption) gets negatives of its own, on top of VSE++'s hardest negative in the
batch (``export.models.butr.ranking_loss``):

* counterfactual images: the image's scene with one object's colour, size or action changed to another
  value (``sceneworld.scene.Edit``, as the counterfactual probe set edits a scene), rendered as SceneWorld
  renders the training image itself (``sceneworld.render.render`` with the image's own generator: a colour
  or size change repaints only that object; an action change may also redraw the objects after it) and
  encoded to regions by the zoo's frozen visual encoder. An image negative serves the captions of its
  image that it makes false: a pair the caption mentions is no longer shown by any object;
* caption negatives: the caption with one attached modifier replaced by another value of the same
  attribute ("a black dog" → "a white dog"; an -ing verb by another the noun can do, taking an object as
  the old one did), or with the values of two objects' modifiers of one attribute swapped ("a black dog
  next to a white cat" → "a white dog next to a black cat"); kept where the changed caption is false of
  the image (one of its pairs is shown by no object).

What a caption attaches is read from SceneWorld's grammar (``sceneworld.captions``: adjectives stand right
before their noun, an -ing verb follows its subject's noun phrase; ``attached_modifiers``) and checked
against the pairs the scene graph records for the caption: a caption whose reading differs gets none.

No held-out pair of the group may reach training through a negative: ``drop_leaks`` removes every image
negative whose scene graph shows one (an object of the noun with that colour, size or action) and every
caption negative that mentions one. Positives are the split's training captions, none of which mentions
one (``export.data.splits``); ``hard_negatives`` checks that too.

The loss (``CounterfactualLoss``, added to ``compcap_lab.training.train.train_vsepp``'s): per positive of
the batch with negatives of a kind, one drawn at random, the hinge
``[margin − s(image, caption) + s(negative image, caption)]+`` and
``[margin − s(image, caption) + s(image, negative caption)]+``, summed over the batch's positives and
divided by the batch size, weighted by ``weight``. Initialisation and batch order are those of
``train_vsepp`` with the same seed; the negatives are drawn from a generator of their own, so a run is
deterministic for a seed, and with ``weight`` 0 it is VSE++'s training exactly.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from itertools import combinations
from typing import Any

import numpy as np
import torch

from compcap_lab.training.train import TrainLog, train_vsepp
from export.data.splits import word_forms
from export.models.vsepp import VSEPP
from export.presets import Preset
from sceneworld.render import render
from sceneworld.scene import ACTIONS, COLOURS, EDIT_ACTIONS_EXCLUDED, SIZES, Edit, EditError, scene_graph
from service.text.concepts import ConceptPair, load_concepts
from service.text.vocabulary import Vocabulary, encode_batch, tokenize

ARCHITECTURE = "VSE++ with counterfactual negatives"
FIELDS = ("colour", "size", "action")
# verbs whose -ing form takes an object in the captions: hold and eat take a prop, ride the ridden horse
# (an object of the scene: never swapped)
TAKES_PROP = frozenset({"hold", "eat"})
NOT_REPLACED = frozenset({"ride"})
Regions = Callable[[np.ndarray], torch.Tensor]  # images uint8 [M, H, W, 3] -> regions float32 [M, R, D]


def pair_of(field: str, value: str, noun: str) -> ConceptPair:
    """The concept pair of an object's ``field`` (colour, size or action) ``value``: ``black cat`` is
    ("adjective", "black", "cat"), ``eat man`` ("verb", "eat", "man")."""
    return ConceptPair("verb" if field == "action" else "adjective", value, noun)


def shown_pairs(graph: dict[str, Any]) -> Counter[ConceptPair]:
    """How many objects of a scene graph show each pair: every object's colour, size and action (if any)
    with its noun — a person's colour (its clothes) too, though captions never say it."""
    shown: Counter[ConceptPair] = Counter()
    for obj in graph["objects"]:
        shown.update(pair_of(f, str(obj[f]), obj["noun"]) for f in FIELDS if obj[f] is not None)
    return shown


@cache
def _words() -> tuple[dict[str, str], dict[str, tuple[str, str]], dict[tuple[str, str], str]]:
    """Caption word → noun concept; modifier word → (field, value) (colour and size synonyms, verbs'
    -ing forms); (field, value) → the word a replacement writes (its first synonym, or that one's -ing)."""
    concepts = load_concepts()
    nouns = {w: n for n in concepts.nouns for w in word_forms(n, concepts)}
    modifiers: dict[str, tuple[str, str]] = {}
    written: dict[tuple[str, str], str] = {}
    for name, table in (("colour", concepts.colours), ("size", concepts.sizes)):
        for value, entry in table.items():
            modifiers.update(dict.fromkeys(entry["synonyms"], (name, value)))
            written[(name, value)] = entry["synonyms"][0]
    for verb, entry in concepts.verbs.items():
        modifiers.update(dict.fromkeys(entry["ing"].values(), ("action", verb)))
        written[("action", verb)] = entry["ing"][entry["synonyms"][0]]
    return nouns, modifiers, written


@dataclass(frozen=True)
class Modifier:
    """A modifier word of a caption attached to a noun: ``position`` in the caption's words."""

    position: int
    field: str
    value: str
    noun: str

    @property
    def pair(self) -> ConceptPair:
        return pair_of(self.field, self.value, self.noun)


def attached_modifiers(words: Sequence[str]) -> list[Modifier]:
    """The modifiers of a SceneWorld caption (its words, ``tokenize``d) and the nouns they attach to, in
    word order: colour and size adjectives standing right before a noun (through other such adjectives:
    "a big black cat"), and -ing verbs, attached to the last noun before them ("a man in a red shirt
    sitting on a bench": sitting → man; "red" before "shirt", no noun of the inventory, is nobody's)."""
    nouns, modifiers, _ = _words()
    found: list[Modifier] = []
    last_noun: str | None = None
    adjectives = {w: m for w, m in modifiers.items() if m[0] != "action"}
    for j, word in enumerate(words):
        if word in nouns:
            last_noun = nouns[word]
            k = j - 1
            while k >= 0 and words[k] in adjectives:
                found.append(Modifier(k, *adjectives[words[k]], last_noun))
                k -= 1
        elif word in modifiers and word not in adjectives and last_noun is not None:
            found.append(Modifier(j, *modifiers[word], last_noun))
    return sorted(found, key=lambda m: m.position)


def _caption_alternatives(modifier: Modifier) -> list[str]:
    """Other values a caption's modifier can be replaced by: any other colour or size; another verb
    the noun can do that, like the old one, takes a prop (hold, eat) or none (ride is never replaced)."""
    if modifier.field == "colour":
        return [c for c in COLOURS if c != modifier.value]
    if modifier.field == "size":
        return [s for s in SIZES if s != modifier.value]
    if modifier.value in NOT_REPLACED:
        return []
    concepts = load_concepts()
    return [
        v
        for v, entry in concepts.verbs.items()
        if v != modifier.value
        and v not in NOT_REPLACED
        and modifier.noun in entry["agents"]
        and (v in TAKES_PROP) == (modifier.value in TAKES_PROP)
    ]


@dataclass(frozen=True)
class CaptionNegative:
    """A caption (its words) with one attribute changed: ``positions`` are the words changed (one
    replaced, or two swapped), all modifiers of ``field``."""

    words: tuple[str, ...]
    field: str
    positions: tuple[int, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


def caption_negatives(
    words: Sequence[str], recorded: Collection[ConceptPair], shown: Collection[ConceptPair]
) -> list[CaptionNegative]:
    """Every caption negative of a caption (``words``; ``recorded``: the pairs its scene graph records it
    mentions) that is false of its image (``shown``: the pairs the image shows): each attached modifier
    replaced by each alternative value, then each two modifiers of one attribute on objects of different
    nouns swapped. None when the grammar's reading (``attached_modifiers``) is not ``recorded``."""
    modifiers = attached_modifiers(words)
    if {m.pair for m in modifiers} != set(recorded):
        return []
    _, _, written = _words()
    found: list[CaptionNegative] = []
    for m in modifiers:
        for value in _caption_alternatives(m):
            changed = list(words)
            changed[m.position] = written[(m.field, value)]
            found.append(CaptionNegative(tuple(changed), m.field, (m.position,)))
    for a, b in combinations(modifiers, 2):
        if a.field == b.field and a.value != b.value and a.noun != b.noun:
            changed = list(words)
            changed[a.position], changed[b.position] = words[b.position], words[a.position]
            found.append(CaptionNegative(tuple(changed), a.field, (a.position, b.position)))
    shown = set(shown)
    return [n for n in found if not {m.pair for m in attached_modifiers(n.words)} <= shown]


@dataclass(frozen=True)
class ImageNegative:
    """A training image's scene with one object's ``field`` changed from ``old`` to ``edit.value``:
    ``graph`` is the edited scene graph (no captions), ``index`` the scene's index in its world."""

    index: int
    edit: Edit
    old: str
    graph: dict[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> tuple[int, int, str, str]:
        return (self.index, self.edit.index, self.edit.field, self.edit.value)

    @cached_property
    def shown(self) -> frozenset[ConceptPair]:
        """The pairs the edited scene shows (``shown_pairs``)."""
        return frozenset(shown_pairs(self.graph))

    def breaks(self, shown: Collection[ConceptPair], mentioned: Iterable[ConceptPair]) -> bool:
        """Whether the edit makes false a caption that mentions ``mentioned`` of an image showing
        ``shown``: one of them was shown and no object of the edited scene shows it."""
        return any(p in shown and p not in self.shown for p in mentioned)


def _image_alternatives(obj: dict[str, Any], field: str) -> list[str]:
    if field == "colour":
        return [c for c in COLOURS if c != obj["colour"]]
    if field == "size":
        return [s for s in SIZES if s != obj["size"]]
    if obj["action"] is None or obj["action"] in EDIT_ACTIONS_EXCLUDED:
        return []
    return [a for a in ACTIONS[obj["noun"]] if a not in EDIT_ACTIONS_EXCLUDED and a != obj["action"]]


def image_negatives(
    graph: dict[str, Any], mentioned: Collection[ConceptPair], world_seed: int, image_size: int
) -> list[ImageNegative]:
    """Every counterfactual variant of a training scene (``graph``, scene ``graph["image_id"]`` of world
    ``world_seed``) that changes a pair its captions mention (``mentioned``) and that no other object
    shows: the object's colour, size or action set to each other value the scene takes (an edit that
    does not fit, ``EditError``, is left out). Raises ``ValueError`` when the world does not give this
    scene back (another seed or image size)."""
    index = int(graph["image_id"])

    def scene(edit: Edit | None = None) -> dict[str, Any]:  # as sceneworld.dataset samples scene ``index``
        return scene_graph(np.random.default_rng([world_seed, index, 0]), index, image_size, edit)

    if scene()["objects"] != graph["objects"]:
        raise ValueError(f"scene {index} is not scene {index} of world seed {world_seed} at {image_size} px")
    shown = shown_pairs(graph)
    found = []
    for obj in graph["objects"]:
        for name in FIELDS:
            pair = pair_of(name, str(obj[name]), obj["noun"])
            if pair not in mentioned or shown[pair] != 1:
                continue
            for value in _image_alternatives(obj, name):
                edit = Edit(int(obj["id"]), name, value, prop_seed=(world_seed, index, 4))
                try:
                    edited = scene(edit)
                except EditError:
                    continue
                found.append(ImageNegative(index, edit, str(obj[name]), edited))
    return found


def drop_leaks(
    images: Sequence[ImageNegative], captions: Sequence[CaptionNegative], held_out: Collection[ConceptPair]
) -> tuple[list[ImageNegative], list[CaptionNegative]]:
    """The leak filter (pure): the negatives in which no held-out pair appears, in their order.

    ``images``: counterfactual images, each judged by its edited scene graph (``ImageNegative.graph``, a
    JSON-ready dict): dropped when an object shows a held-out pair — its noun with the pair's colour,
    size or action (``shown_pairs``). ``captions``: caption negatives, each judged by its words
    (``CaptionNegative.words``, tuple[str, ...]): dropped when a modifier attached to a noun makes a
    held-out pair (``attached_modifiers``). ``held_out``: the group's pairs (``ConceptPair``). Returns
    (kept image negatives, kept caption negatives): sub-lists of the inputs."""
    held = frozenset(held_out)
    kept_images = [n for n in images if not held & set(shown_pairs(n.graph))]
    kept_captions = [n for n in captions if not held & {m.pair for m in attached_modifiers(n.words)}]
    return kept_images, kept_captions


def render_negatives(negatives: Sequence[ImageNegative], world_seed: int, image_size: int) -> np.ndarray:
    """uint8 [M, S, S, 3]: each negative's scene rendered as its world rendered the training image
    (``sceneworld.dataset``: the generator ``default_rng([seed, index, 1])``)."""
    out = np.empty((len(negatives), image_size, image_size, 3), dtype=np.uint8)
    for k, n in enumerate(negatives):
        out[k] = render(n.graph, np.random.default_rng([world_seed, n.index, 1]), image_size)
    return out


class Counterfactuals:
    """Counterfactual images rendered and encoded to regions, each once (the groups share them):
    ``regions(negatives)`` gives their rows of ``store`` [M, R, D]."""

    def __init__(self, encode: Regions, world_seed: int, image_size: int, chunk: int = 512) -> None:
        self.encode, self.world_seed, self.image_size, self.chunk = encode, world_seed, image_size, chunk
        self.rows: dict[tuple[int, int, str, str], int] = {}
        self.parts: list[torch.Tensor] = []
        self.seconds = 0.0

    def add(self, negatives: Sequence[ImageNegative]) -> list[int]:
        """Render and encode the negatives not met yet; each negative's row of ``store``."""
        fresh = list({n.key: n for n in negatives if n.key not in self.rows}.values())
        start = time.perf_counter()
        for begin in range(0, len(fresh), self.chunk):
            part = fresh[begin : begin + self.chunk]
            self.parts.append(self.encode(render_negatives(part, self.world_seed, self.image_size)))
            for n in part:
                self.rows[n.key] = len(self.rows)
        self.seconds += time.perf_counter() - start
        return [self.rows[n.key] for n in negatives]

    @property
    def store(self) -> torch.Tensor:
        """float32 [M, R, D]: every counterfactual image's regions, in the order first added."""
        if len(self.parts) > 1:
            self.parts = [torch.cat(self.parts)]
        return self.parts[0] if self.parts else torch.empty(0)


@dataclass(frozen=True)
class Negatives:
    """Each training pair's own negatives, for the P (image, caption) pairs in ``_caption_pairs`` order.

    ``image_regions`` float32 [M, R, D]: counterfactual images' regions; pair p's image negatives are
    ``image_regions[image_rows[image_start[p]:image_start[p + 1]]]`` (``image_start`` int64 [P + 1],
    ``image_rows`` int64 [K]). ``caption_tokens`` int64 [Q, T] (BOS w1..wn EOS PAD, as ``encode_batch``)
    and ``caption_lengths`` int64 [Q]: pair p's caption negatives are rows
    ``caption_start[p]:caption_start[p + 1]`` (``caption_start`` int64 [P + 1]). ``counts``: what was
    made and dropped (for the training log)."""

    image_regions: torch.Tensor
    image_start: np.ndarray
    image_rows: np.ndarray
    caption_tokens: torch.Tensor
    caption_lengths: torch.Tensor
    caption_start: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def pairs(self) -> int:
        return len(self.image_start) - 1


def _start(sizes: Sequence[int]) -> np.ndarray:
    """CSR offsets int64 [len(sizes) + 1] of consecutive runs of these sizes."""
    start = np.zeros(len(sizes) + 1, dtype=np.int64)
    start[1:] = np.cumsum(sizes)
    return start


def hard_negatives(
    graphs: Sequence[dict[str, Any]],
    captions: Sequence[Sequence[str]],
    held_out: Collection[ConceptPair],
    counterfactuals: Counterfactuals,
    vocab: Vocabulary,
    max_length: int,
    seed: int,
    per_image: int = 3,
) -> Negatives:
    """The negatives of every (image, caption) pair of a training set: ``graphs`` the images' scene
    graphs (with their recorded captions), ``captions`` the captions trained on (per image, as
    ``train_vsepp`` takes them). At most ``per_image`` counterfactual images per image (a random
    choice of the leak-free variants that make one of its captions false, one per changed object and
    attribute first); every leak-free caption negative. Raises ``ValueError`` when a training caption
    mentions a held-out pair (the split would leak)."""
    held = frozenset(held_out)
    chosen: list[list[ImageNegative]] = []
    per_pair: list[tuple[int, Counter[ConceptPair], frozenset[ConceptPair], list[CaptionNegative]]] = []
    counts: Counter[str] = Counter()
    for row, (graph, texts) in enumerate(zip(graphs, captions, strict=True)):
        recorded = {c["text"]: frozenset(ConceptPair(*p) for p in c["pairs"]) for c in graph["captions"]}
        mentions = [recorded.get(t) for t in texts]
        leaked = sorted({p.label for m in mentions if m for p in m & held})
        if leaked:
            raise ValueError(f"a training caption of image {graph['image_id']} mentions {leaked[0]!r}")
        shown = shown_pairs(graph)
        mentioned = frozenset(p for m in mentions if m for p in m)
        proposed = image_negatives(graph, mentioned, counterfactuals.world_seed, counterfactuals.image_size)
        proposed_captions = [
            caption_negatives(tokenize(t), m, set(shown)) if m is not None else []
            for t, m in zip(texts, mentions, strict=True)
        ]
        kept, _ = drop_leaks(proposed, [], held)
        counts["image_proposed"] += len(proposed)
        counts["image_leaks_dropped"] += len(proposed) - len(kept)
        useful = [n for n in kept if any(n.breaks(shown, m) for m in mentions if m)]
        chosen.append(_choose(useful, per_image, np.random.default_rng([seed, int(graph["image_id"])])))
        for text_negs, m in zip(proposed_captions, mentions, strict=True):
            _, kept_captions = drop_leaks([], text_negs, held)
            counts["caption_proposed"] += len(text_negs)
            counts["caption_leaks_dropped"] += len(text_negs) - len(kept_captions)
            per_pair.append((row, shown, m or frozenset(), kept_captions))
    rows = counterfactuals.add([n for per in chosen for n in per])
    row_of = dict(zip((n.key for per in chosen for n in per), rows, strict=True))
    image_lists = [[row_of[n.key] for n in chosen[r] if n.breaks(shown, m)] for r, shown, m, _ in per_pair]
    texts = [n.text for *_, negs in per_pair for n in negs]
    tokens, lengths = encode_batch(vocab, texts, max_length)
    image_rows = np.array([i for x in image_lists for i in x], dtype=np.int64)
    counts.update(
        image_negatives=len(rows),
        caption_negatives=len(texts),
        pairs=len(per_pair),
        pairs_with_image_negatives=sum(1 for x in image_lists if x),
        pairs_with_caption_negatives=sum(1 for *_, negs in per_pair if negs),
    )
    return Negatives(
        counterfactuals.store,
        _start([len(x) for x in image_lists]),
        image_rows,
        torch.from_numpy(tokens),
        torch.from_numpy(lengths),
        _start([len(negs) for *_, negs in per_pair]),
        dict(counts),
    )


def _choose(negatives: list[ImageNegative], limit: int, rng: np.random.Generator) -> list[ImageNegative]:
    """At most ``limit`` of ``negatives``, in a random order that takes one value per (object, field)
    before a second one of the same."""
    order = [negatives[k] for k in rng.permutation(len(negatives))]
    firsts: dict[tuple[int, str], ImageNegative] = {}
    for n in order:
        firsts.setdefault((n.edit.index, n.edit.field), n)
    rest = [n for n in order if firsts[(n.edit.index, n.edit.field)] is not n]
    return [*firsts.values(), *rest][:limit]


def _draw(start: np.ndarray, pairs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For the batch's ``pairs`` [B]: the batch positions that have negatives, and for each one of its
    negatives drawn uniformly (a row of the CSR ``start`` [P + 1])."""
    count = start[pairs + 1] - start[pairs]
    where = np.nonzero(count > 0)[0]
    offset = np.floor(rng.random(len(where)) * count[where]).astype(np.int64)
    return where, start[pairs[where]] + offset


@dataclass
class CounterfactualLoss:
    """The hinge terms against each positive's own counterfactual image and caption (see the module
    docstring), for ``train_vsepp(extra=...)``; ``rng`` draws the negatives; ``totals`` sums each
    term over the steps (for the training log)."""

    negatives: Negatives
    margin: float
    weight: float
    rng: np.random.Generator
    totals: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def __call__(
        self, model: VSEPP, pairs: np.ndarray, images: torch.Tensor, texts: torch.Tensor
    ) -> torch.Tensor:
        neg = self.negatives
        positive = (images * texts).sum(-1)  # [B]
        where, picked = _draw(neg.image_start, pairs, self.rng)
        image_term = images.new_zeros(())
        if len(where):
            other = model.image_embedding(neg.image_regions[neg.image_rows[picked]])
            image_term = self._hinge(positive[where], (other * texts[where]).sum(-1), len(pairs))
        where, picked = _draw(neg.caption_start, pairs, self.rng)
        caption_term = images.new_zeros(())
        if len(where):
            lengths = neg.caption_lengths[picked]
            tokens = neg.caption_tokens[picked, : int(lengths.max())]
            other = model.text_embedding(tokens, lengths - 1)
            caption_term = self._hinge(positive[where], (images[where] * other).sum(-1), len(pairs))
        self.totals["steps"] += 1
        self.totals["image_hinge"] += float(image_term.detach())
        self.totals["caption_hinge"] += float(caption_term.detach())
        return self.weight * (image_term + caption_term)

    def _hinge(self, positive: torch.Tensor, negative: torch.Tensor, batch: int) -> torch.Tensor:
        return (self.margin - positive + negative).clamp(min=0).sum() / batch


def train_compositional(
    regions: torch.Tensor,
    captions: Sequence[Sequence[str]],
    negatives: Negatives,
    vocab: Vocabulary,
    preset: Preset,
    seed: int,
    *,
    weight: float = 1.0,
    desc: str = "compositional",
) -> tuple[VSEPP, TrainLog]:
    """A VSE++ ranker trained on ``regions`` [N, R, D] and their ``captions`` as ``train_vsepp`` trains
    one with the same ``seed``, its loss plus ``weight`` × the counterfactual hinges (``negatives``:
    ``hard_negatives`` of these captions). The log's ``extra`` holds the negatives' counts and each
    hinge's mean over the steps."""
    pairs = sum(len(c) for c in captions)
    if negatives.pairs != pairs:
        raise ValueError(f"negatives are for {negatives.pairs} pairs, the captions make {pairs}")
    loss = CounterfactualLoss(negatives, preset.margin, weight, np.random.default_rng([seed, 1]))
    model, log = train_vsepp(regions, captions, vocab, preset, seed, desc=desc, extra=loss)
    steps = max(1, loss.totals["steps"])
    log.extra.update({k: float(v) for k, v in negatives.counts.items()})
    log.extra.update(
        weight=weight,
        image_hinge=loss.totals["image_hinge"] / steps,
        caption_hinge=loss.totals["caption_hinge"] / steps,
    )
    return model, log


__all__ = [
    "ARCHITECTURE",
    "CaptionNegative",
    "CounterfactualLoss",
    "Counterfactuals",
    "ImageNegative",
    "Modifier",
    "Negatives",
    "attached_modifiers",
    "caption_negatives",
    "drop_leaks",
    "hard_negatives",
    "image_negatives",
    "pair_of",
    "render_negatives",
    "shown_pairs",
    "train_compositional",
]
