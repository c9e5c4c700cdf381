"""Seed 001 §4.3 substitutivity, scored: the original caption O (a plain search) against the caption S
decoded with ``synonym_substitution`` (S1 fine-grained words replaced by their S2 category words while
the search runs), in the shape of seed 001 Table 6 — O vs GT, S vs GT, O vs S (O as the reference) and
Ot vs St (the sub-captions after the first S1 word of O and after its substitute in S) — plus the share
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


def after_first(words: list[str], targets: set[str]) -> list[str] | None:
    """The words after the first one in ``targets`` (``None`` when none is)."""
    for n, w in enumerate(words):
        if w in targets:
            return words[n + 1 :]
    return None


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
) -> dict[str, Any]:
    """Table 6 rows over the images of ``substituted`` (O and S top-1 captions per image id).

    mapping: the S1 -> S2 words substituted; references: ground truth per image; cider: CIDEr-D with
    training document frequencies (``None``: from the references scored)."""
    ids = sorted(substituted)
    rows: dict[str, dict[str, float | None]] = {}
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
            i: (
                after_first(tokenize(o_text[i]), set(mapping)),
                after_first(tokenize(s_text[i]), set(mapping.values())),
            )
            for i in ids
        }
        tail_ids = [i for i, (ot, st) in tails.items() if ot and st]
        if tail_ids:
            pairs["Ot vs St"] = (
                {i: [" ".join(tails[i][0] or [])] for i in tail_ids},
                {i: " ".join(tails[i][1] or []) for i in tail_ids},
            )
        for name, (refs, hyps) in pairs.items():
            scores = caption_metrics(refs, hyps, cider, meteor).to_dict()
            rows[name] = {m: scores.get(m) for m in METRICS} | {"images": float(len(hyps))}
    same = sum(exact_replacement(original[i], substituted[i], mapping) for i in ids)
    return {
        "images": len(original),
        "substituted": len(ids),
        "words": dict(sorted(mapping.items())),
        "rows": rows,
        "exact_replacement": same / len(ids) if ids else None,
        "examples": [{"image_id": i, "O": original[i], "S": substituted[i]} for i in ids[:8]],
    }


__all__ = [
    "METRICS",
    "ROWS",
    "after_first",
    "chosen_images",
    "exact_replacement",
    "substituted_words",
    "substitutivity_result",
]
