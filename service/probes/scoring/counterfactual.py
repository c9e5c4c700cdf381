"""The counterfactual probe's maths, scored on a counterfactual probe set (``service.probesets``):
each minimal pair is a scene with a seen pair's object (a white cat) and the same scene with exactly
that object's colour, size or action set to a held-out value (a black cat).

Each side is *hit* at K when one of its top-K captions attaches its pair (the attachment checker's
pairs, as Recall@K). A top-1 caption that misses is classified by the side's scene graph, in this
order (the first that applies):

* ``modifier_elsewhere`` — the pair's modifier is attached to another noun of the scene whose objects
  do not have it ("a cat next to a black dog" for a black cat and a white dog);
* ``noun_missing`` — the caption does not mention the noun;
* ``wrong_value`` — the noun is attached to another value of the same kind (another colour, the other
  size, another verb: "a white cat" for a black cat);
* ``modifier_omitted`` — the noun is mentioned without the modifier.

So ``hit`` and the four classes share every top-1 caption out. Every figure is a mean over the pairs
of each pair's share of minimal pairs, with its 95% two-stage bootstrap interval (pairs, then minimal
pairs: ``service.evaluation.intervals``); held-out − seen is a paired test over the minimal pairs (the
same scenes on both sides), each figure's difference with its interval and sign-flip p-value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from service.evaluation.intervals import RESAMPLES, bootstrap_interval, mean_of_means, paired_test
from service.probesets import PairMinimalPairs
from service.text.concepts import ConceptPair, load_concepts

KS = (1, 5)
MISS_CLASSES = ("modifier_elsewhere", "noun_missing", "wrong_value", "modifier_omitted")
OUTCOMES = ("hit", *MISS_CLASSES)
SIDES = ("held_out", "seen")
PERMUTATIONS = 10_000
Generated = Mapping[int, Sequence[str]]  # image id -> captions in final order (best first)
Attached = Mapping[str, frozenset[ConceptPair]]  # caption -> its attached pairs
_WORD = re.compile(r"[a-z]+")


def _noun_words() -> dict[str, str]:
    out: dict[str, str] = {}
    for noun, entry in load_concepts().nouns.items():
        for word in entry["synonyms"]:
            out[word] = noun
            plural = entry.get("plural", {}).get(word)
            if plural:
                out[plural] = noun
    return out


_NOUNS = _noun_words()


def nouns_mentioned(caption: str) -> frozenset[str]:
    """The inventory nouns a caption names (synonyms and plurals, by word)."""
    return frozenset(_NOUNS[w] for w in _WORD.findall(caption.lower()) if w in _NOUNS)


def same_kind_values(pair: ConceptPair) -> frozenset[str]:
    """The values a pair's modifier is one of: the colours, the sizes or the verbs."""
    c = load_concepts()
    if pair.kind == "verb":
        return frozenset(c.verbs)
    return frozenset(c.colours) if pair.modifier in c.colours else frozenset(c.sizes)


def _true_of(scene: Mapping[str, Any], noun: str, modifier: str) -> bool:
    return any(
        o["noun"] == noun and modifier in (o["colour"], o["size"], o["action"]) for o in scene["objects"]
    )


def classify(
    pair: ConceptPair, caption: str, attached: frozenset[ConceptPair], scene: Mapping[str, Any]
) -> str:
    """``hit`` or the miss class of one caption for ``pair`` on the image of ``scene`` (its graph)."""
    if pair in attached:
        return "hit"
    nouns = {o["noun"] for o in scene["objects"]}
    for p in attached:
        if (
            p.kind == pair.kind
            and p.modifier == pair.modifier
            and p.noun != pair.noun
            and p.noun in nouns
            and not _true_of(scene, p.noun, p.modifier)
        ):
            return "modifier_elsewhere"
    if pair.noun not in nouns_mentioned(caption) | {p.noun for p in attached}:
        return "noun_missing"
    values = same_kind_values(pair)
    if any(p.noun == pair.noun and p.kind == pair.kind and p.modifier in values for p in attached):
        return "wrong_value"
    return "modifier_omitted"


def _units(
    entry: PairMinimalPairs,
    minimal: Sequence[Any],
    generated: Generated,
    attached: Attached,
    scenes: Mapping[int, Mapping[str, Any]],
    ks: Sequence[int],
) -> dict[str, dict[str, list[float]]]:
    """side -> figure ("hit@K", or an outcome) -> one 0/1 value per minimal pair."""
    out: dict[str, dict[str, list[float]]] = {
        s: {**{f"hit@{k}": [] for k in ks}, **{o: [] for o in OUTCOMES}} for s in SIDES
    }
    for m in minimal:
        for side, image, pair in (
            ("held_out", m.held_out, entry.pair),
            ("seen", m.seen, entry.seen_pair(m)),
        ):
            captions = list(generated[image])
            for k in ks:
                out[side][f"hit@{k}"].append(float(any(pair in attached[c] for c in captions[:k])))
            outcome = (
                classify(pair, captions[0], attached[captions[0]], scenes[image])
                if captions
                else "noun_missing"
            )
            for o in OUTCOMES:
                out[side][o].append(float(o == outcome))
    return out


def _interval(groups: Sequence[Sequence[float]], with_intervals: bool) -> dict[str, Any] | None:
    if not with_intervals:
        return None
    found = bootstrap_interval(groups, resamples=RESAMPLES)
    return found.as_dict() if found is not None else None


def _part(
    per_pair: Sequence[dict[str, list[float]]], ks: Sequence[int], with_intervals: bool
) -> dict[str, Any]:
    """Means over pairs of one side's figures, each with its interval (None when not computed)."""
    hit = {str(k): [p[f"hit@{k}"] for p in per_pair] for k in ks}
    outcome = {o: [p[o] for p in per_pair] for o in OUTCOMES}
    return {
        "pairs": len(per_pair),
        "recall": {k: mean_of_means(v) for k, v in hit.items()},
        "recall_interval": {k: _interval(v, with_intervals) for k, v in hit.items()},
        "outcomes": {o: mean_of_means(v) for o, v in outcome.items()},
        "outcome_intervals": {o: _interval(v, with_intervals) for o, v in outcome.items()},
    }


def _difference(
    held: Sequence[dict[str, list[float]]],
    seen: Sequence[dict[str, list[float]]],
    ks: Sequence[int],
    with_intervals: bool,
) -> dict[str, Any]:
    """held-out − seen of every figure, as a paired test over the minimal pairs (None: not computed)."""

    def test(key: str) -> dict[str, Any] | None:
        if not with_intervals:
            return None
        found = paired_test([h[key] for h in held], [s[key] for s in seen], permutations=PERMUTATIONS)
        return found.as_dict() if found is not None else None

    return {
        "recall": {str(k): test(f"hit@{k}") for k in ks},
        "outcomes": {o: test(o) for o in OUTCOMES},
    }


def counterfactual_result(
    entries: Sequence[PairMinimalPairs],
    minimal: Mapping[str, Sequence[Any]],
    generated: Generated,
    attached: Attached,
    scenes: Mapping[int, Mapping[str, Any]],
    held_out: frozenset[ConceptPair] | None,
    ks: Sequence[int] = KS,
    with_intervals: bool = True,
) -> dict[str, Any]:
    """The probe's result.

    entries: the set's pairs to report; minimal: pair label -> its minimal pairs scored (a job may cap
    them); generated: captions of both images of each; attached: caption -> attached pairs (every
    top-K caption); scenes: image id -> scene graph; held_out: the pairs the captioner's training held
    out (None: not known) — each row says whether its pair was (``model_held_out``). ``pairs`` holds two
    rows per pair, its held-out side (``held_out`` true) and its seen side, with hit rates (``recall``),
    outcome shares and their intervals; ``held_out`` / ``seen`` the means over pairs; ``difference``
    held-out − seen of every figure as a paired test; ``with_intervals`` False leaves the intervals and
    tests None (a running job's partial result)."""
    ks = tuple(sorted(set(ks)))
    rows: list[dict[str, Any]] = []
    units: dict[str, list[dict[str, list[float]]]] = {s: [] for s in SIDES}
    per_pair_tests: dict[str, dict[str, Any]] = {}
    for entry in entries:
        chosen = list(minimal.get(entry.pair.label, ()))
        if not chosen:
            continue
        u = _units(entry, chosen, generated, attached, scenes, ks)
        per_pair_tests[entry.pair.label] = _difference([u["held_out"]], [u["seen"]], ks, with_intervals)
        for side in SIDES:
            units[side].append(u[side])
            part = _part([u[side]], ks, with_intervals)
            seen_values: dict[str, int] = {}
            for m in chosen:
                seen_values[m.seen_value] = seen_values.get(m.seen_value, 0) + 1
            rows.append(
                {
                    "pair": entry.pair.label,
                    "kind": entry.pair.kind,
                    "field": entry.field,
                    "side": side,
                    "held_out": side == "held_out",
                    "model_held_out": (entry.pair in held_out) if held_out is not None else None,
                    "images": len(chosen),
                    "value": entry.pair.modifier if side == "held_out" else seen_values,
                    "hits": {str(k): int(sum(u[side][f"hit@{k}"])) for k in ks},
                    "recall": part["recall"],
                    "recall_interval": part["recall_interval"],
                    "outcomes": part["outcomes"],
                    "outcome_intervals": part["outcome_intervals"],
                }
            )
    parts = {s: _part(units[s], ks, with_intervals) for s in SIDES}
    return {
        "ks": list(ks),
        "outcome_classes": list(OUTCOMES),
        "held_out_known": held_out is not None,
        "pairs": rows,
        "held_out": parts["held_out"],
        "seen": parts["seen"],
        "difference": _difference(units["held_out"], units["seen"], ks, with_intervals),
        "pair_differences": per_pair_tests,
        "minimal_pairs": sum(len(u["hit"]) for u in units["held_out"]),
        "intervals": with_intervals,
    }


__all__ = [
    "KS",
    "MISS_CLASSES",
    "OUTCOMES",
    "classify",
    "counterfactual_result",
    "nouns_mentioned",
    "same_kind_values",
]
