"""The four built-in probe-set formats, each one ``SetFormat`` record, and what their readers return.
The format of ``probe.json`` and the files beside it is documented in ``service.probesets.read``; the
kind-specific keys are:

* systematicity: ``"pairs": [{"kind", "modifier", "noun", "group", "comb": [ids], "no_comb": [ids]}]``
  — comb: the pair is in the scene and attached in at least one reference; no_comb: both constituents
  are present, no object carries the pair and no reference mentions it;
* productivity: ``"objects": {str(id): [noun, ...]} | null``, ``"density": {"1"|"2"|"3"|"4": [ids]} |
  null`` ("4" = four or more objects), ``"length": {"short"|"medium"|"long": [ids]}`` and
  ``"length_edges": [e1, e2]`` (short: mean reference length <= e1, medium: <= e2, long: > e2);
* substitutivity: ``"pairs": [{"category", "fine", "images": [ids]}]``, ``"substitutions": [[S1 fine,
  S2 category], ...]``, ``"min_count"``, ``"synonym_counts"``;
* counterfactual: ``"pairs": [{"kind", "modifier", "noun", "field", "minimal_pairs": [{"held_out": id,
  "seen": id, "object": k, "seen_value": v}]}]`` — each minimal pair is a scene with a seen pair's
  object (``seen_value`` with the noun) and the same scene with exactly that object's ``field`` set to
  the held-out modifier (``export.probesets.counterfactual``).

Each format's readers (``SetFormat.readers``) are typed functions of a loaded set here — ``pair_images``,
``objects``, ``buckets``, ``substitutions``, ``substitution_pairs``, ``minimal_pairs`` — which the
kinds call, and which ``ProbeSet`` offers as methods of a set of that format (``probe.pairs()``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from service.probesets.format import ProbeSetError, SetFormat, image_ids, register_format, require
from service.text.concepts import ConceptPair

if TYPE_CHECKING:
    from service.probesets.read import ProbeSet

DENSITY_BUCKETS = ("1", "2", "3", "4")
LENGTH_BUCKETS = ("short", "medium", "long")


@dataclass(frozen=True)
class PairImages:
    """The systematicity images of one concept pair."""

    pair: ConceptPair
    group: int
    comb: tuple[int, ...]
    no_comb: tuple[int, ...]


@dataclass(frozen=True)
class MinimalPair:
    """Counterfactual: a seen image and the same scene with object ``object``'s ``field`` changed from
    ``seen_value`` to the held-out modifier."""

    held_out: int
    seen: int
    object: int
    seen_value: str


@dataclass(frozen=True)
class PairMinimalPairs:
    """Counterfactual: the minimal pairs of one held-out pair."""

    pair: ConceptPair
    field: str
    minimal_pairs: tuple[MinimalPair, ...]

    def seen_pair(self, m: MinimalPair) -> ConceptPair:
        return ConceptPair(self.pair.kind, m.seen_value, self.pair.noun)


def _concept(p: Mapping[str, Any]) -> ConceptPair:
    return ConceptPair(str(p["kind"]), str(p["modifier"]), str(p["noun"]))


def check_systematicity(info: Mapping[str, Any], where: str, known: set[int]) -> None:
    for n, p in enumerate(info["pairs"]):
        require(p, ("kind", "modifier", "noun", "group"), f"{where}: pairs[{n}]")
        image_ids(p["comb"], f"{where}: pairs[{n}].comb", known)
        image_ids(p["no_comb"], f"{where}: pairs[{n}].no_comb", known)


def systematicity_pairs(info: Mapping[str, Any]) -> list[PairImages]:
    return [
        PairImages(
            _concept(p),
            int(p["group"]),
            tuple(int(i) for i in p["comb"]),
            tuple(int(i) for i in p["no_comb"]),
        )
        for p in info["pairs"]
    ]


def check_productivity(info: Mapping[str, Any], where: str, known: set[int]) -> None:
    if info.get("objects") is not None:
        image_ids([int(k) for k in info["objects"]], f"{where}: objects", known)
    for by in ("density", "length"):
        if info.get(by) is not None:
            for name, ids in info[by].items():
                image_ids(ids, f"{where}: {by}[{name!r}]", known)


def check_substitutivity(info: Mapping[str, Any], where: str, known: set[int]) -> None:
    for n, p in enumerate(info["pairs"]):
        if "category" not in p or "fine" not in p:
            raise ProbeSetError(f"{where}: pairs[{n}] needs 'category' and 'fine'")
        image_ids(p["images"], f"{where}: pairs[{n}].images", known)
    for s in info["substitutions"]:
        if not (isinstance(s, list) and len(s) == 2):
            raise ProbeSetError(f"{where}: substitutions must be [S1, S2] pairs, got {s!r}")


def check_counterfactual(info: Mapping[str, Any], where: str, known: set[int]) -> None:
    for n, p in enumerate(info["pairs"]):
        require(p, ("kind", "modifier", "noun", "field"), f"{where}: pairs[{n}]")
        for m, mp in enumerate(p["minimal_pairs"]):
            image_ids([mp["held_out"], mp["seen"]], f"{where}: pairs[{n}].minimal_pairs[{m}]", known)


def counterfactual_pairs(info: Mapping[str, Any]) -> list[PairMinimalPairs]:
    return [
        PairMinimalPairs(
            _concept(p),
            str(p["field"]),
            tuple(
                MinimalPair(int(m["held_out"]), int(m["seen"]), int(m["object"]), str(m["seen_value"]))
                for m in p["minimal_pairs"]
            ),
        )
        for p in info["pairs"]
    ]


# -- the readers of a loaded set (ProbeSet.<name>() of a set of the format) ----------------------------


def pair_images(probe_set: ProbeSet) -> list[PairImages]:
    """Systematicity: the images of each pair (``probe.pairs()``)."""
    probe_set.expect("systematicity")
    return systematicity_pairs(probe_set.info)


def objects(probe_set: ProbeSet) -> dict[int, list[str]] | None:
    """Productivity: each image's object nouns (None when the source had no object lists)."""
    probe_set.expect("productivity")
    found = probe_set.info.get("objects")
    if found is None:
        return None
    return {int(k): [str(n) for n in v] for k, v in found.items()}


def buckets(probe_set: ProbeSet, by: Literal["density", "length"]) -> dict[str, list[int]]:
    """Productivity: image ids per object count ("1".."4", "4" = four or more) or per reference
    length tercile ("short", "medium", "long")."""
    probe_set.expect("productivity")
    if by not in ("density", "length"):
        raise ProbeSetError(f"by must be 'density' or 'length', got {by!r}")
    table = probe_set.info.get(by)
    if table is None:
        raise ProbeSetError(f"{probe_set.where}: probe set {probe_set.name!r} has no {by!r} buckets")
    return {str(k): [int(i) for i in v] for k, v in table.items()}


def substitutions(probe_set: ProbeSet) -> list[tuple[str, str]]:
    """Substitutivity: the (S1 fine word, S2 category word) table, singular and plural forms."""
    probe_set.expect("substitutivity")
    return [(str(a), str(b)) for a, b in probe_set.info["substitutions"]]


def substitution_pairs(probe_set: ProbeSet) -> list[tuple[str, str, list[int]]]:
    """Substitutivity: (category, fine, image ids) of every candidate pair."""
    probe_set.expect("substitutivity")
    return [
        (str(p["category"]), str(p["fine"]), [int(i) for i in p["images"]]) for p in probe_set.info["pairs"]
    ]


def minimal_pairs(probe_set: ProbeSet) -> list[PairMinimalPairs]:
    """Counterfactual: the minimal pairs of each held-out pair."""
    probe_set.expect("counterfactual")
    return counterfactual_pairs(probe_set.info)


SYSTEMATICITY = register_format(
    SetFormat(
        "systematicity",
        check_systematicity,
        keys="pairs: comb / no_comb images of each concept pair",
        readers={"pairs": pair_images},
    )
)
PRODUCTIVITY = register_format(
    SetFormat(
        "productivity",
        check_productivity,
        keys="objects, density and length buckets of image ids",
        readers={"objects": objects, "buckets": buckets},
    )
)
SUBSTITUTIVITY = register_format(
    SetFormat(
        "substitutivity",
        check_substitutivity,
        keys="pairs: (category, fine) images; substitutions",
        readers={"substitutions": substitutions, "substitution_pairs": substitution_pairs},
    )
)
COUNTERFACTUAL = register_format(
    SetFormat(
        "counterfactual",
        check_counterfactual,
        scene_graphs=True,
        keys="pairs: minimal pairs (held-out, seen) of each held-out pair",
        readers={"minimal_pairs": minimal_pairs},
    )
)
BUILTIN = (SYSTEMATICITY, PRODUCTIVITY, SUBSTITUTIVITY, COUNTERFACTUAL)
