"""Compositional train/val/test splits of a ``CaptionDataset`` (SceneWorld or COCO).

* ``systematicity`` (Nikolaus et al., 2019, §3 and the authors' code; Pantazopoulos et al., 2022, §4.1): for
  held-out group N, an image is held out when at least one of its reference captions mentions one of the
  group's six pairs. What a caption mentions is the truth where the dataset records it — SceneWorld scene
  graphs list each caption's pairs (``caption_pairs_truth``, matched by text; no parse, spaCy never loaded) —
  and otherwise (COCO) the pairs the dependency parse finds *attached* (``AttachmentChecker``, cached).
  ``info["pairs_source"]`` says which ("scene_graph" | "parser"); the parse misses some mentions ("a red pony
  eating grass"), which the truth keeps out of training. Training images are those none of whose captions
  mentions a group pair; the same per-caption pairs give ``info["mentions"]`` (the Recall@K buckets). The
  held-out images are split into ``val`` and ``test`` (half/half by default, seeded). ``test_no_comb`` (the
  Test no Comb of Pantazopoulos et al., 2022) has as many images as ``test``, drawn from the non-held-out
  images in which no pair of the group has both constituents present, and is removed from ``train``. Presence
  is exact from the scene graph for SceneWorld (some object has the colour / size / action, some object is the
  noun), and "both words mentioned in some caption" for COCO.
* ``productivity`` (Pantazopoulos et al., 2022, §4.2): ``by="length"`` — the images with the longest mean
  caption length (tokens) form ``test_rich``; ``by="density"`` — the images with most objects (scene graph
  objects or COCO instance boxes) form ``test_dense``. From the rest, a random ``test_base`` and ``val`` of
  the same size; everything else trains.
* ``substitutivity`` (Pantazopoulos et al., 2022, §4.3): a random (or Karpathy) train/val/test split as
  ``full``, plus ``info["synonyms"]``: the category ↔ fine-grained word pairs of the candidate table
  (``service.text.synonyms``: Pantazopoulos et al., 2022, Table 10 for COCO, the inventory's synonym sets for
  SceneWorld) of which both words occur at least ``min_count`` (200) times in the training captions.
* ``full``: nothing held out; the Karpathy split when the dataset has one, else random.

Every split is deterministic given the dataset, kind, group, options and ``seed``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from export.data.coco_captions import CaptionDataset, load_captions, load_folder
from export.data.pairs import caption_pairs_truth, default_cache_path, image_caption_pairs
from service.text.concepts import ConceptInventory, ConceptPair, load_concepts
from service.text.synonyms import candidate_table, plural
from service.text.vocabulary import tokenize

if TYPE_CHECKING:
    from service.text.attachment import AttachmentChecker

KINDS = ("systematicity", "productivity", "substitutivity", "full")
PAIRS_SOURCES = ("auto", "scene_graph", "parser")  # systematicity: where caption pairs come from
SPLIT_FILE = "split.json"

IRREGULAR_VERB_FORMS = {
    "eat": ("ate", "eaten"),
    "lie": ("lay", "lain", "lies"),
    "lay": ("laid", "lays"),
    "ride": ("rode", "ridden"),
    "fly": ("flew", "flown", "flies"),
    "hold": ("held",),
    "carry": ("carried", "carries"),
    "stand": ("stood",),
    "sit": ("sat",),
}


@dataclass
class Split:
    kind: str  # systematicity | productivity | substitutivity | full
    group: int | None
    pairs: list[ConceptPair]  # held-out pairs (systematicity), else []
    sets: dict[str, list[int]]  # train, val, test (+ test_no_comb | test_rich/test_dense + test_base)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "group": self.group,
            "pairs": [[p.kind, p.modifier, p.noun] for p in self.pairs],
            "sets": {name: list(ids) for name, ids in self.sets.items()},
            "info": self.info,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Split:
        return cls(
            kind=str(data["kind"]),
            group=None if data.get("group") is None else int(data["group"]),
            pairs=[ConceptPair(*p) for p in data.get("pairs", [])],
            sets={name: [int(i) for i in ids] for name, ids in data["sets"].items()},
            info=dict(data.get("info", {})),
        )


# -------------------------------------------------------------------------------------------- helpers
def _shuffled(ids: list[int], rng: np.random.Generator) -> list[int]:
    ordered = sorted(ids)
    return [ordered[k] for k in rng.permutation(len(ordered))]


def _tail_size(n: int, count: int | None, fraction: float) -> int:
    size = int(count) if count is not None else round(fraction * n)
    if size < 1:
        raise ValueError(f"held-out set size must be >= 1 (got {size} of {n} images)")
    return size


def _random_sets(
    ids: list[int], rng: np.random.Generator, val: int | None, test: int | None, fraction: float
) -> dict[str, list[int]]:
    order = _shuffled(ids, rng)
    n_val = _tail_size(len(order), val, fraction)
    n_test = _tail_size(len(order), test, fraction)
    if n_val + n_test >= len(order):
        raise ValueError(f"val ({n_val}) + test ({n_test}) leave no training images of {len(order)}")
    return {
        "train": sorted(order[n_val + n_test :]),
        "val": sorted(order[:n_val]),
        "test": sorted(order[n_val : n_val + n_test]),
    }


def _karpathy_sets(ds: CaptionDataset) -> dict[str, list[int]]:
    assert ds.karpathy is not None
    sets: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for i in ds.image_ids:
        name = ds.karpathy.get(i)
        if name in ("train", "restval"):
            sets["train"].append(i)
        elif name in ("val", "test"):
            sets[name].append(i)
    return sets


def _base_sets(
    ds: CaptionDataset, rng: np.random.Generator, options: dict[str, Any]
) -> tuple[dict[str, list[int]], str]:
    if ds.karpathy is not None and options.get("use_karpathy", True):
        return _karpathy_sets(ds), "karpathy"
    sets = _random_sets(
        ds.image_ids, rng, options.get("val_size"), options.get("test_size"), options.get("fraction", 0.1)
    )
    return sets, "random"


def _set_counts(sets: dict[str, list[int]]) -> dict[str, int]:
    return {name: len(ids) for name, ids in sets.items()}


def word_forms(concept: str, concepts: ConceptInventory) -> set[str]:
    """Surface forms of a noun / adjective / verb concept (synonyms, plurals, -s/-ing/past forms)."""
    out: set[str] = set()
    if concept in concepts.nouns:
        entry = concepts.nouns[concept]
        for word in entry["synonyms"]:
            out |= {word, entry.get("plural", {}).get(word, plural(word, concepts))}
    elif concept in concepts.verbs:
        entry = concepts.verbs[concept]
        for word in entry["synonyms"]:
            out |= {word, str(entry.get("ing", {}).get(word, word + "ing"))}
            out.add(word[:-1] + "ies" if word.endswith("y") and word not in ("lay",) else word + "s")
            out |= set(IRREGULAR_VERB_FORMS.get(word, ()))
    else:
        out |= set(concepts.synonyms(concept))
    return out


def _scene_atoms(scene: dict[str, Any]) -> set[str]:
    atoms: set[str] = set()
    for obj in scene.get("objects", []):
        atoms.add(obj["noun"])
        atoms.add(obj["colour"])
        atoms.add(obj["size"])
        if obj.get("action"):
            atoms.add(obj["action"])
    return atoms


def constituents_present(
    ds: CaptionDataset, pairs: list[ConceptPair], concepts: ConceptInventory
) -> tuple[dict[int, set[ConceptPair]], str]:
    """Per image, the pairs of ``pairs`` whose two constituents are both present: exact from the scene
    graph when the dataset has them, else both concepts mentioned (any form) in some caption."""
    out: dict[int, set[ConceptPair]] = {}
    if ds.scenes is not None and all(i in ds.scenes for i in ds.image_ids):
        for i in ds.image_ids:
            atoms = _scene_atoms(ds.scenes[i])
            out[i] = {p for p in pairs if p.modifier in atoms and p.noun in atoms}
        return out, "scene_graph"
    forms = {c: word_forms(c, concepts) for p in pairs for c in (p.modifier, p.noun)}
    for i in ds.image_ids:
        words = {w for caption in ds.captions[i] for w in tokenize(caption)}
        out[i] = {p for p in pairs if words & forms[p.modifier] and words & forms[p.noun]}
    return out, "caption_words"


def caption_pairs(
    ds: CaptionDataset,
    checker: AttachmentChecker | None,
    concepts: ConceptInventory,
    options: dict[str, Any],
) -> tuple[dict[int, list[frozenset[ConceptPair]]], dict[str, Any]]:
    """Per image, the pairs each caption mentions, and ``{"pairs_source", "parse", "cache"}`` for the
    split's info. ``options["pairs_source"]``: "auto" (default: the scene graphs' recorded pairs when
    every caption has them, else the parser), "scene_graph" (required) or "parser" (always parse)."""
    wanted = options.get("pairs_source", "auto")
    if wanted not in PAIRS_SOURCES:
        raise ValueError(f"pairs_source must be one of {PAIRS_SOURCES}, got {wanted!r}")
    if wanted != "parser":
        truth = caption_pairs_truth(ds, concepts)
        if truth is not None:
            return truth, {"pairs_source": "scene_graph", "parse": None, "cache": None}
        if wanted == "scene_graph":
            raise ValueError("pairs_source 'scene_graph' needs recorded pairs for every caption (SceneWorld)")
    cache = options.get("cache", "default")
    cache_path = default_cache_path(ds) if cache == "default" else (Path(cache) if cache else None)
    per_image, stats = image_caption_pairs(ds, checker=checker, cache=cache_path)
    cache_name = str(cache_path) if cache_path is not None else None
    return per_image, {"pairs_source": "parser", "parse": stats, "cache": cache_name}


# -------------------------------------------------------------------------------------------- kinds
def _systematicity(
    ds: CaptionDataset,
    group: int | None,
    checker: AttachmentChecker | None,
    rng: np.random.Generator,
    options: dict[str, Any],
) -> Split:
    concepts = checker.concepts if checker is not None else load_concepts()
    if group is None:
        raise ValueError("systematicity needs a held-out group (1..4)")
    pairs = concepts.group(group)
    group_set = set(pairs)
    per_image, source_info = caption_pairs(ds, checker, concepts, options)
    mentions: dict[int, Counter[ConceptPair]] = {}
    for i in ds.image_ids:
        counter: Counter[ConceptPair] = Counter()
        for found in per_image[i]:
            counter.update(found & group_set)
        if counter:
            mentions[i] = counter
    held = sorted(mentions)
    rest = [i for i in ds.image_ids if i not in mentions]
    if len(held) < 2:
        raise ValueError(f"only {len(held)} images mention a pair of group {group}: cannot split val/test")
    order = _shuffled(held, rng)
    n_val = round(len(order) * float(options.get("val_fraction", 0.5)))
    n_val = min(max(n_val, 1), len(order) - 1)
    val, test = sorted(order[:n_val]), sorted(order[n_val:])
    present, presence_source = constituents_present(ds, pairs, concepts)
    candidates = [i for i in rest if not present[i]]
    n_nc = min(len(test), len(candidates))
    no_comb = sorted(_shuffled(candidates, rng)[:n_nc])
    no_comb_set = set(no_comb)
    train = [i for i in rest if i not in no_comb_set]
    sets = {"train": train, "val": val, "test": test, "test_no_comb": no_comb}

    def per_pair(ids: list[int]) -> dict[str, int]:
        return {p.label: sum(1 for i in ids if mentions[i][p] > 0) for p in pairs}

    info: dict[str, Any] = {
        "counts": _set_counts(sets),
        "pair_images": {"held_out": per_pair(held), "val": per_pair(val), "test": per_pair(test)},
        # per pair, image id -> number of reference captions mentioning it (Recall@K buckets)
        "mentions": {
            name: {p.label: {str(i): mentions[i][p] for i in ids if mentions[i][p]} for p in pairs}
            for name, ids in (("val", val), ("test", test))
        },
        "test_no_comb": {
            "presence": presence_source,
            "candidates": len(candidates),
            "shortfall": len(test) - n_nc,
        },
        "val_fraction": float(options.get("val_fraction", 0.5)),
        **source_info,
    }
    return Split("systematicity", group, list(pairs), sets, info)


def _productivity(ds: CaptionDataset, rng: np.random.Generator, options: dict[str, Any]) -> Split:
    by = options.get("by", "length")
    if by == "length":
        score: dict[int, float] = {
            i: float(np.mean([len(tokenize(c)) for c in ds.captions[i]])) for i in ds.image_ids
        }
        tail_name = "test_rich"
    elif by == "density":
        if ds.object_counts is None:
            raise ValueError("density split needs object counts (scene_graphs.json or an instances file)")
        counts = ds.object_counts
        score = {i: float(counts.get(i, 0)) for i in ds.image_ids}
        tail_name = "test_dense"
    else:
        raise ValueError(f"by must be 'length' or 'density', got {by!r}")
    n = _tail_size(len(ds.image_ids), options.get("count"), float(options.get("fraction", 0.1)))
    if 3 * n >= len(ds.image_ids):
        raise ValueError(f"3 x {n} held-out images leave no training images of {len(ds.image_ids)}")
    tiebreak = dict(zip(sorted(ds.image_ids), rng.permutation(len(ds.image_ids)).tolist(), strict=True))
    ranked = sorted(ds.image_ids, key=lambda i: (-score[i], tiebreak[i]))
    tail = sorted(ranked[:n])
    order = _shuffled(ranked[n:], rng)
    base, val, train = sorted(order[:n]), sorted(order[n : 2 * n]), sorted(order[2 * n :])
    sets = {"train": train, "val": val, "test_base": base, tail_name: tail}

    def mean(ids: list[int]) -> float:
        return round(float(np.mean([score[i] for i in ids])), 3)

    info = {
        "by": by,
        "counts": _set_counts(sets),
        "threshold": score[ranked[n - 1]],
        "mean_score": {name: mean(ids) for name, ids in sets.items()},
        "score": "mean caption length (tokens)" if by == "length" else "objects per image",
        "test_set": tail_name,
    }
    return Split("productivity", None, [], sets, info)


def synonym_counts(
    captions: list[str], table: tuple[tuple[str, str], ...], concepts: ConceptInventory
) -> list[dict[str, Any]]:
    """Occurrences (singular + plural tokens) of both words of each candidate pair in ``captions``."""
    tokens = Counter(w for c in captions for w in tokenize(c))

    def count(word: str) -> int:
        forms = {word, plural(word, concepts)}
        return sum(tokens[f] for f in forms)

    return [{"category": a, "fine": b, "category_count": count(a), "fine_count": count(b)} for a, b in table]


def _substitutivity(ds: CaptionDataset, rng: np.random.Generator, options: dict[str, Any]) -> Split:
    concepts = load_concepts()
    sets, source = _base_sets(ds, rng, options)
    min_count = int(options.get("min_count", 200))
    table = tuple(options.get("table") or candidate_table(concepts))
    counts = synonym_counts(ds.subset_captions(sets["train"]), table, concepts)
    kept = [c for c in counts if c["category_count"] >= min_count and c["fine_count"] >= min_count]
    info = {
        "counts": _set_counts(sets),
        "source": source,
        "min_count": min_count,
        "synonyms": kept,
        "candidates": counts,
    }
    return Split("substitutivity", None, [], sets, info)


def _full(ds: CaptionDataset, rng: np.random.Generator, options: dict[str, Any]) -> Split:
    sets, source = _base_sets(ds, rng, options)
    return Split("full", None, [], sets, {"counts": _set_counts(sets), "source": source})


# -------------------------------------------------------------------------------------------- API
def build_split(
    ds: CaptionDataset,
    kind: str,
    group: int | None = None,
    checker: AttachmentChecker | None = None,
    seed: int = 0,
    **options: Any,
) -> Split:
    """Build a split of ``ds``. Options: systematicity — ``val_fraction`` (0.5), ``pairs_source``
    ("auto": recorded scene-graph pairs when the dataset has them, else the parser; "scene_graph";
    "parser"), ``cache`` (path of the parser's caption-pairs cache; default next to the dataset when
    writable; None/False: no cache);
    productivity — ``by`` ("length" | "density"), ``fraction`` (0.1) or ``count``; substitutivity and
    full — ``val_size``/``test_size`` or ``fraction`` (0.1) for random splits, ``use_karpathy`` (True),
    substitutivity ``min_count`` (200) and ``table``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not ds.image_ids:
        raise ValueError("dataset has no captioned images")
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    if kind == "systematicity":
        split = _systematicity(ds, group, checker, rng, options)
    elif kind == "productivity":
        split = _productivity(ds, rng, options)
    elif kind == "substitutivity":
        split = _substitutivity(ds, rng, options)
    else:
        split = _full(ds, rng, options)
    split.info.update(
        {
            "seed": seed,
            "images": len(ds.image_ids),
            "dataset": str(ds.source) if ds.source else str(ds.root),
            "options": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in options.items() if k != "table"
            },
            "seconds": round(time.perf_counter() - t0, 3),
        }
    )
    check_disjoint(split)
    return split


def check_disjoint(split: Split) -> None:
    """Every image is in at most one set."""
    seen: dict[int, str] = {}
    for name, ids in split.sets.items():
        for i in ids:
            if i in seen:
                raise AssertionError(f"image {i} is in both {seen[i]} and {name}")
            seen[i] = name


def split_dir_for(data: Path, kind: str, group: int | None) -> Path:
    """The one place a split of ``data`` lives by default: ``<data>/splits/<kind>[_<group>]``. ``compcap
    splits`` writes there unless given ``--out``, and ``compcap-lab evaluate`` (and every study) reads from
    there unless given ``--split-file``, so the two compose."""
    name = kind if group is None else f"{kind}_{group}"
    return Path(data) / "splits" / name


def split_path_for(data: Path, kind: str, group: int | None) -> Path:
    """The split file in ``split_dir_for``: ``<data>/splits/<kind>[_<group>]/split.json``."""
    return split_dir_for(data, kind, group) / SPLIT_FILE


def write_split(split: Split, out: Path) -> Path:
    """Write ``out/split.json`` and return its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SPLIT_FILE
    path.write_text(json.dumps(split.to_json(), indent=1), encoding="utf-8")
    return path


def load_split(path: Path) -> Split:
    """Read a ``split.json`` (or the folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / SPLIT_FILE
    return Split.from_json(json.loads(path.read_text(encoding="utf-8")))


def load_dataset(data: Path) -> CaptionDataset:
    """A dataset folder (``captions.json`` inside) or a COCO captions JSON file."""
    data = Path(data)
    return load_folder(data) if data.is_dir() else load_captions(data)


def summary(split: Split, path: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": split.kind,
        "group": split.group,
        "pairs": [p.label for p in split.pairs],
        "sets": {name: len(ids) for name, ids in split.sets.items()},
    }
    for key in (
        "pair_images",
        "test_no_comb",
        "pairs_source",
        "parse",
        "by",
        "threshold",
        "mean_score",
        "source",
    ):
        if key in split.info:
            out[key] = split.info[key]
    if split.kind == "substitutivity":
        out["synonyms"] = [f"{s['category']}<->{s['fine']}" for s in split.info["synonyms"]]
    out["seconds"] = split.info.get("seconds")
    if path is not None:
        out["path"] = str(path)
    return out


def run_splits_cli(
    data: Path,
    kind: str,
    group: int | None,
    out: Path | None = None,
    by: str = "length",
    seed: int = 0,
    cache: Path | None = None,
    **options: Any,
) -> dict[str, Any]:
    """What ``compcap-lab splits`` calls: load ``data``, build the split, write ``out/split.json`` (default
    ``out``: ``split_dir_for(data, kind, group)``, where ``compcap-lab evaluate`` looks), print and return a
    summary. ``cache``: caption-pairs cache file (default: next to the dataset if writable, else
    ``out/caption_pairs.json``)."""
    out = split_dir_for(data, kind, group) if out is None else Path(out)
    ds = load_dataset(Path(data))
    if kind == "systematicity":
        if cache is None:
            cache = default_cache_path(ds) or Path(out) / "caption_pairs.json"
        options["cache"] = Path(cache)
    if kind == "productivity":
        options["by"] = by
    split = build_split(ds, kind, group=group, seed=seed, **options)
    path = write_split(split, out)
    result = summary(split, path)
    print(json.dumps(result, indent=2))
    if path.resolve() != split_path_for(data, kind, group).resolve():
        group_flag = "" if group is None else f" --group {group}"
        print(
            f"compcap-lab evaluate reads this split only when told where it is: "
            f"compcap-lab evaluate --data {data} --split {kind}{group_flag} --split-file {path} ...",
            file=sys.stderr,
        )
    return result
