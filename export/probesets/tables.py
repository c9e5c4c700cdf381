"""What SceneWorld and COCO probe sets share: the systematicity splits over the probe images, the
reference-length terciles, and the substitution table (S1 fine -> S2 category) of the training captions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from export.data.splits import Split, synonym_counts
from service.text.concepts import ConceptPair, load_concepts
from service.text.synonyms import candidate_table, plural
from service.text.vocabulary import tokenize


def scene_carries(scene: dict[str, Any], pair: ConceptPair) -> bool:
    """Some object of the scene graph is the pair's noun with the modifier as its colour, size or action."""
    return any(
        o["noun"] == pair.noun and pair.modifier in (o["colour"], o["size"], o["action"])
        for o in scene["objects"]
    )


def pair_record(pair: ConceptPair, group: int, comb: Sequence[int], no_comb: Sequence[int]) -> dict[str, Any]:
    """One entry of a systematicity probe set's ``pairs``."""
    return {
        "kind": pair.kind,
        "modifier": pair.modifier,
        "noun": pair.noun,
        "group": group,
        "comb": sorted(int(i) for i in comb),
        "no_comb": sorted(int(i) for i in no_comb),
    }


def systematicity_splits(
    pairs: Sequence[dict[str, Any]], mentions: Mapping[int, Mapping[ConceptPair, int]], info: dict[str, Any]
) -> list[Split]:
    """One split per group over the probe images: no training images, ``test`` = the union of the
    group's comb images, ``test_no_comb`` = the union of its no_comb images, so ``compcap-lab evaluate
    --data <probe folder> --split systematicity --group g`` decodes exactly those. ``mentions``: image ->
    pair -> number of references mentioning it (``info["mentions"]``, as ``compcap-lab splits`` writes)."""
    out = []
    for group in sorted({int(p["group"]) for p in pairs}):
        members = [p for p in pairs if int(p["group"]) == group]
        group_pairs = [ConceptPair(p["kind"], p["modifier"], p["noun"]) for p in members]
        test = sorted({i for p in members for i in p["comb"]})
        no_comb = sorted({i for p in members for i in p["no_comb"]})
        sets = {"train": [], "val": [], "test": test, "test_no_comb": no_comb}
        per_pair = {
            p.label: {str(i): mentions[i][p] for i in test if mentions.get(i, {}).get(p, 0)}
            for p in group_pairs
        }
        split_info = {
            **info,
            "counts": {k: len(v) for k, v in sets.items()},
            "pair_images": {"test": {p.label: len(per_pair[p.label]) for p in group_pairs}},
            "mentions": {"test": per_pair},
        }
        out.append(Split("systematicity", group, group_pairs, sets, split_info))
    return out


def full_split(ids: Sequence[int], info: dict[str, Any]) -> Split:
    """Every probe image as ``test`` (``compcap-lab evaluate --data <probe folder> --split full``)."""
    sets: dict[str, list[int]] = {"train": [], "val": [], "test": sorted(int(i) for i in ids)}
    return Split("full", None, [], sets, {**info, "counts": {k: len(v) for k, v in sets.items()}})


def mean_length(captions: Sequence[str]) -> float:
    return float(np.mean([len(tokenize(c)) for c in captions])) if captions else 0.0


def length_terciles(captions: Mapping[int, Sequence[str]]) -> tuple[dict[str, list[int]], list[float]]:
    """Images by mean reference length (tokens): short <= e1 < medium <= e2 < long, where e1 and e2 are
    the 1/3 and 2/3 quantiles over these images. Returns the buckets and [e1, e2]."""
    lengths = {int(i): mean_length(c) for i, c in captions.items()}
    if not lengths:
        return {"short": [], "medium": [], "long": []}, [0.0, 0.0]
    e1, e2 = (float(x) for x in np.quantile(list(lengths.values()), [1 / 3, 2 / 3]))
    buckets: dict[str, list[int]] = {"short": [], "medium": [], "long": []}
    for i, n in sorted(lengths.items()):
        buckets["short" if n <= e1 else "medium" if n <= e2 else "long"].append(i)
    return buckets, [round(e1, 4), round(e2, 4)]


def substitution_table(
    train_captions: Sequence[str], min_count: int, table: Sequence[tuple[str, str]] | None = None
) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """``(S1 fine, S2 category)`` pairs, singular and plural, of the candidate pairs (default
    ``candidate_table``) whose two words both occur ``min_count`` times in ``train_captions`` (as
    ``compcap_lab.studies.substitutivity.substitution_table`` without its vocabulary filter), and the counts
    of every candidate (``export.data.splits.synonym_counts``)."""
    concepts = load_concepts()
    counts = synonym_counts(list(train_captions), tuple(table or candidate_table(concepts)), concepts)
    kept = [c for c in counts if c["category_count"] >= min_count and c["fine_count"] >= min_count]
    return substitutions(kept), counts


def substitutions(kept: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The S1 -> S2 table of kept candidate pairs (``{"category", "fine", ...}``, e.g. a substitutivity
    split's ``info["synonyms"]``): (fine, category) and their plurals, each S1 word once."""
    concepts = load_concepts()
    pairs: dict[str, str] = {}
    for c in kept:
        for fine, category in (
            (c["fine"], c["category"]),
            (plural(c["fine"], concepts), plural(c["category"], concepts)),
        ):
            if fine != category and fine not in pairs:
                pairs[fine] = category
    return sorted(pairs.items())
