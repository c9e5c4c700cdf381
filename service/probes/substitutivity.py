"""Seed 001 §4.3 substitutivity, scored: the original caption O (a plain search) against the caption S
decoded with ``synonym_substitution`` (S1 fine-grained words replaced by their S2 category words while
the search runs), in the shape of seed 001 Table 6 — O vs GT, S vs GT, O vs S (O as the reference) and
Ot vs St (the sub-captions after the first S1 word of O and after the word that replaced it in S,
``substituted_tails``) — plus the share
of images where S is exactly O with the word replaced. Shared by the live probe and
``compcap substitutivity``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from service.evaluation.cider import CiderD
from service.evaluation.metrics import caption_metrics
from service.text.vocabulary import tokenize

ROWS = ("O vs GT", "S vs GT", "O vs S", "Ot vs St")
METRICS = ("bleu4", "meteor", "cider_d")


def substituted_tails(
    o_words: Sequence[str], s_words: Sequence[str], mapping: Mapping[str, str]
) -> tuple[list[str], list[str]] | None:
    """(Ot, St): the words of O after its first S1 word ``w`` (a key of ``mapping``) and the words of S
    after the word that replaced it, ``mapping[w]`` (``None`` when O has no S1 word or S no substitute).

    The substitute is not S's first ``mapping[w]``: O may hold that word itself before ``w`` ("a dog and
    a puppy ..."), and the search writes it there too. O and S are decoded alike up to the substitution,
    so the substitute is the occurrence of ``mapping[w]`` in S that comes after as many of them as O
    has before ``w``: O = "a dog and a puppy on the grass", S = "a dog and a dog on the grass" give
    Ot = St = "on the grass"."""
    first = next((n for n, w in enumerate(o_words) if w in mapping), None)
    if first is None:
        return None
    target = mapping[o_words[first]]
    before = sum(w == target for w in o_words[:first])
    at = [n for n, w in enumerate(s_words) if w == target]
    if len(at) <= before:
        return None
    return list(o_words[first + 1 :]), list(s_words[at[before] + 1 :])


def substituted_words(
    original: Mapping[int, str], table: Sequence[tuple[str, str]], min_generated: int = 1
) -> dict[str, int]:
    """S1 words of ``table`` that at least ``min_generated`` O captions hold, with their counts."""
    s1 = {a for a, _ in table}
    counts = Counter(w for text in original.values() for w in set(tokenize(text)) if w in s1)
    return {w: n for w, n in sorted(counts.items()) if n >= min_generated}


def chosen_images(original: Mapping[int, str], words: set[str]) -> list[int]:
    """Images whose O caption holds one of ``words`` (they are decoded again as S)."""
    return [i for i, text in original.items() if words & set(tokenize(text))]


def exact_replacement(o: str, s: str, mapping: Mapping[str, str]) -> bool:
    """S is O with every S1 word replaced by its S2 word."""
    return [mapping.get(w, w) for w in tokenize(o)] == tokenize(s)


def substitutivity_result(
    original: Mapping[int, str],
    substituted: Mapping[int, str],
    mapping: Mapping[str, str],
    references: Mapping[int, Sequence[str]],
    cider: CiderD | None,
    meteor: bool = True,
    metrics: Sequence[str] = METRICS,
) -> dict[str, Any]:
    """Table 6 rows over the images of ``substituted`` (O and S top-1 captions per image id).

    mapping: the S1 -> S2 words substituted; references: ground truth per image; cider: CIDEr-D with
    training document frequencies (``None``: from the references scored); metrics: the scores kept per
    row (``caption_metrics`` names). ``images_with_tails``: the images scored in the Ot vs St row."""
    ids = sorted(substituted)
    rows: dict[str, dict[str, float | None]] = {}
    tails: dict[int, tuple[list[str], list[str]]] = {}
    if ids:
        o_text = {i: original[i] for i in ids}
        s_text = {i: substituted[i] for i in ids}
        gt = {i: list(references[i]) for i in ids}
        pairs = {
            "O vs GT": (gt, o_text),
            "S vs GT": (gt, s_text),
            "O vs S": ({i: [o_text[i]] for i in ids}, s_text),
        }
        tails = {
            i: t
            for i in ids
            if (t := substituted_tails(tokenize(o_text[i]), tokenize(s_text[i]), mapping)) and t[0] and t[1]
        }
        if tails:
            pairs["Ot vs St"] = (
                {i: [" ".join(ot)] for i, (ot, _) in tails.items()},
                {i: " ".join(st) for i, (_, st) in tails.items()},
            )
        for name, (refs, hyps) in pairs.items():
            scores = caption_metrics(refs, hyps, cider, meteor).to_dict()
            rows[name] = {m: scores.get(m) for m in metrics} | {"images": float(len(hyps))}
    same = sum(exact_replacement(original[i], substituted[i], mapping) for i in ids)
    return {
        "images": len(original),
        "substituted": len(ids),
        "words": dict(sorted(mapping.items())),
        "rows": rows,
        "images_with_tails": len(tails),
        "exact_replacement": same / len(ids) if ids else None,
        "exact_replacements": same,
        "examples": [{"image_id": i, "O": original[i], "S": substituted[i]} for i in ids[:8]],
    }


__all__ = [
    "METRICS",
    "ROWS",
    "chosen_images",
    "exact_replacement",
    "substituted_tails",
    "substituted_words",
    "substitutivity_result",
]
