"""Recall@K of held-out concept pairs (Nikolaus et al., 2019, Eq. 1 and §4).

For a held-out pair p, the evaluation images of p are the images for which at least one reference
caption contains p *attached* (adjective → noun, verb → noun, as decided by a pairs function such as
``service.text.attachment.AttachmentChecker.pairs_batch``). Then

    Recall@K(p) = |{m : any of the top-K generated captions of image m contains p}| / M_p

with M_p the number of evaluation images of p. The reported figure is the unweighted mean over the
pairs that have at least one evaluation image. "Bucket b" restricts the evaluation images to those with
*at least* b references containing p (§4: "at least 2 / 3 / 4 / 5 of the reference captions"); bucket 1
is the plain figure. Per-category means follow Table 3: colour / size adjectives × animate / inanimate
noun, verbs transitive / intransitive, from the ``animate`` / ``transitive`` flags of ``concepts.json``.

All recall values are fractions in [0, 1]; a pair (bucket, category) without images is ``None`` and is
left out of the means. Every distinct caption (generated or reference) is parsed once per call;
wrap the pairs function in ``CachedPairs`` to parse once across calls (several runs on one split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.text.concepts import ConceptInventory, ConceptPair, load_concepts

PairsFn = Callable[[Sequence[str]], list[frozenset[ConceptPair]]]
"""captions → for each caption, the set of inventory pairs attached in it (same order, same length)."""

DEFAULT_KS: tuple[int, ...] = (1, 2, 3, 4, 5)
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 3, 4, 5)
CATEGORIES: tuple[str, ...] = (
    "colour_animate",
    "colour_inanimate",
    "size_animate",
    "size_inanimate",
    "verb_transitive",
    "verb_intransitive",
)


class CachedPairs:
    """A memoising pairs function: each distinct caption is handed to ``pairs_fn`` once, ever."""

    def __init__(self, pairs_fn: PairsFn) -> None:
        self.pairs_fn = pairs_fn
        self.cache: dict[str, frozenset[ConceptPair]] = {}

    def __call__(self, captions: Sequence[str]) -> list[frozenset[ConceptPair]]:
        todo = sorted({c for c in captions if c not in self.cache})
        if todo:
            found = self.pairs_fn(todo)
            if len(found) != len(todo):
                raise ValueError(f"pairs function returned {len(found)} results for {len(todo)} captions")
            self.cache.update(zip(todo, found, strict=True))
        return [self.cache[c] for c in captions]


def pair_category(pair: ConceptPair, concepts: ConceptInventory | None = None) -> str | None:
    """Table 3 category of ``pair`` (one of ``CATEGORIES``), ``None`` if the inventory cannot place it."""
    inv = concepts or load_concepts()
    nouns = inv.nouns
    if pair.kind == "adjective":
        if pair.noun not in nouns:
            return None
        animacy = "animate" if nouns[pair.noun].get("animate") else "inanimate"
        if pair.modifier in inv.colours:
            return f"colour_{animacy}"
        if pair.modifier in inv.sizes:
            return f"size_{animacy}"
        return None
    if pair.kind == "verb":
        verbs = inv.verbs
        if pair.modifier not in verbs:
            return None
        return "verb_transitive" if verbs[pair.modifier].get("transitive") else "verb_intransitive"
    return None


@dataclass(frozen=True)
class PairRecall:
    """Recall of one pair. ``images``: evaluation images of the pair; ``hits[K]``: images with a hit in
    the top K; ``recall[K]`` = hits / images (``None`` without images); ``bucket_images[b]`` /
    ``bucket_recall[b][K]``: the same over images with at least ``b`` references containing the pair;
    ``first_rank``: evaluation image -> the first rank (1-based, at most the largest K) whose caption
    holds the pair, None without one — the per-image data the recalls count (not in ``to_dict``)."""

    pair: ConceptPair
    category: str | None
    images: int
    hits: dict[int, int]
    recall: dict[int, float | None]
    bucket_images: dict[int, int]
    bucket_recall: dict[int, dict[int, float | None]]
    first_rank: dict[int, int | None] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.pair.kind,
            "modifier": self.pair.modifier,
            "noun": self.pair.noun,
            "category": self.category,
            "images": self.images,
            "hits": {str(k): v for k, v in self.hits.items()},
            "recall": {str(k): v for k, v in self.recall.items()},
            "by_bucket": {
                str(b): {
                    "images": self.bucket_images[b],
                    "recall": {str(k): v for k, v in self.bucket_recall[b].items()},
                }
                for b in self.bucket_images
            },
        }


@dataclass(frozen=True)
class RecallReport:
    """``mean[K]``: unweighted mean of Recall@K over the pairs with images. ``by_bucket[b][K]``: the
    same over "at least b references" images (pairs without such images left out; ``bucket_pairs[b]``
    counts the pairs that entered). ``per_category[c][K]``: mean over the category's pairs with images."""

    ks: tuple[int, ...]
    per_pair: dict[str, PairRecall]
    mean: dict[int, float | None]
    by_bucket: dict[int, dict[int, float | None]]
    bucket_pairs: dict[int, int]
    per_category: dict[str, dict[int, float | None]]
    category_pairs: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: integer keys become strings ("1".."5")."""
        return {
            "recall_at_k": {str(k): v for k, v in self.mean.items()},
            "per_pair": {label: p.to_dict() for label, p in self.per_pair.items()},
            "by_bucket": {
                str(b): {"pairs": self.bucket_pairs[b], "recall": {str(k): v for k, v in r.items()}}
                for b, r in self.by_bucket.items()
            },
            "per_category": {
                c: {"pairs": self.category_pairs.get(c, []), "recall": {str(k): v for k, v in r.items()}}
                for c, r in self.per_category.items()
            },
        }


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def recall_at_k(
    generated: Mapping[int, Sequence[str]],
    references: Mapping[int, Sequence[str]],
    pairs: Sequence[ConceptPair],
    pairs_fn: PairsFn,
    ks: Sequence[int] = DEFAULT_KS,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    concepts: ConceptInventory | None = None,
) -> RecallReport:
    """Recall@K of held-out ``pairs`` over the evaluation images.

    generated: image id → generated captions in final order (best first; the top K are used, fewer if
        fewer were generated); must cover every image of ``references``.
    references: image id → reference captions; its keys are the evaluation images.
    pairs: the held-out pairs (duplicates ignored); pairs_fn: see ``PairsFn``.
    ks: the K values (≥ 1); buckets: the "at least b references" thresholds (≥ 1).
    concepts: inventory for ``pair_category`` (default: the packaged ``concepts.json``)."""
    ks = tuple(sorted(set(ks)))
    buckets = tuple(sorted(set(buckets)))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be non-empty and >= 1, got {ks}")
    if not buckets or buckets[0] < 1:
        raise ValueError(f"buckets must be non-empty and >= 1, got {buckets}")
    missing = [i for i in references if i not in generated]
    if missing:
        raise ValueError(f"generated has no captions for {len(missing)} evaluation images, e.g. {missing[0]}")
    unique_pairs = list(dict.fromkeys(pairs))
    k_max = ks[-1]

    # parse every distinct caption once
    texts = sorted(
        {c for i in references for c in references[i]} | {c for i in references for c in generated[i][:k_max]}
    )
    parsed = dict(zip(texts, pairs_fn(texts), strict=True)) if texts else {}

    per_pair: dict[str, PairRecall] = {}
    for pair in unique_pairs:
        n_images = 0
        hits = dict.fromkeys(ks, 0)
        b_images = dict.fromkeys(buckets, 0)
        b_hits = {b: dict.fromkeys(ks, 0) for b in buckets}
        first_rank: dict[int, int | None] = {}
        for image, refs in references.items():
            mentions = sum(pair in parsed[r] for r in refs)
            if mentions == 0:
                continue
            n_images += 1
            gen = generated[image]
            first = next((rank for rank, c in enumerate(gen[:k_max], 1) if pair in parsed[c]), None)
            first_rank[image] = first
            for b in buckets:
                if mentions >= b:
                    b_images[b] += 1
            for k in ks:
                if first is not None and first <= k:
                    hits[k] += 1
                    for b in buckets:
                        if mentions >= b:
                            b_hits[b][k] += 1
        per_pair[pair.label] = PairRecall(
            pair=pair,
            category=pair_category(pair, concepts),
            images=n_images,
            hits=hits,
            recall={k: (hits[k] / n_images if n_images else None) for k in ks},
            bucket_images=b_images,
            bucket_recall={
                b: {k: (b_hits[b][k] / b_images[b] if b_images[b] else None) for k in ks} for b in buckets
            },
            first_rank=first_rank,
        )

    results = list(per_pair.values())
    mean = {k: _mean([p.recall[k] for p in results]) for k in ks}
    by_bucket = {b: {k: _mean([p.bucket_recall[b][k] for p in results]) for k in ks} for b in buckets}
    bucket_pairs = {b: sum(p.bucket_images[b] > 0 for p in results) for b in buckets}
    per_category: dict[str, dict[int, float | None]] = {}
    category_pairs: dict[str, list[str]] = {}
    for cat in CATEGORIES:
        members = [p for p in results if p.category == cat]
        category_pairs[cat] = [p.pair.label for p in members]
        per_category[cat] = {k: _mean([p.recall[k] for p in members]) for k in ks}
    return RecallReport(
        ks=ks,
        per_pair=per_pair,
        mean=mean,
        by_bucket=by_bucket,
        bucket_pairs=bucket_pairs,
        per_category=per_category,
        category_pairs=category_pairs,
    )


__all__ = [
    "CATEGORIES",
    "CachedPairs",
    "PairRecall",
    "PairsFn",
    "RecallReport",
    "pair_category",
    "recall_at_k",
]
