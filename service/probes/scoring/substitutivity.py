"""Substitutivity (Pantazopoulos et al., 2022, §4.3), scored: the original caption O (a plain search)
against the caption S decoded with ``synonym_substitution`` (S1 fine-grained words replaced by their S2
category words while the search runs), in the shape of the paper's Table 6 — O vs GT, S vs GT, O vs S
(O as the reference) and Ot vs St (the sub-captions after the first S1 word of O and after the word
that replaced it in S, ``substituted_tails``) — plus the share of images where S is exactly O with the
word replaced. Shared by the live probe and ``compcap-lab substitutivity``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from service.evaluation.bleu import SMALL, TINY, bleu_stats
from service.evaluation.cider import CiderD
from service.evaluation.intervals import SEED, bootstrap_sums
from service.evaluation.metrics import caption_metrics, normalise
from service.probes.scoring.uncertainty import KEYS, interval, method, paired, shared, values
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


def bleu4_of_sums(sums: np.ndarray) -> np.ndarray:
    """Corpus BLEU-4 of rows of summed statistics ``[hyp_length, ref_length, guess1..4, correct1..4]``
    (``service.evaluation.bleu.bleu_from_stats``'s formula, vectorised): ``[R, 10]`` -> ``[R]``."""
    product = np.prod((sums[:, 6:10] + TINY) / (sums[:, 2:6] + SMALL), axis=1)
    score = product ** (1.0 / 4)
    ratio = (sums[:, 0] + TINY) / (sums[:, 1] + SMALL)
    penalty = np.where(ratio < 1, np.exp(1 - 1 / np.minimum(ratio, 1.0)), 1.0)
    return np.asarray(score * penalty)


def bleu4_units(
    references: Mapping[int, Sequence[str]], hypotheses: Mapping[int, str]
) -> dict[int, list[int]]:
    """Per image, its BLEU statistics as a row (``bleu4_of_sums``' layout), text normalised as
    ``caption_metrics`` scores it."""
    out = {}
    for i, h in hypotheses.items():
        st = bleu_stats(normalise(h), [normalise(r) for r in references[i]], 4)
        out[i] = [st.hyp_length, st.ref_length, *st.guess, *st.correct]
    return out


def with_intervals(result: dict[str, Any], seed: int = SEED) -> dict[str, Any]:
    """``result`` with a 95% interval beside each row's BLEU-4 (``bleu4_interval``: a bootstrap over
    the row's images of the corpus BLEU-4 from their kept statistics) and CIDEr-D
    (``cider_d_interval``: over the images' CIDEr-D), and beside ``exact_replacement``; METEOR (a
    corpus score of a Java scorer) has none. In place; returned."""
    each = result.get("per_image") or {}
    for name, row in (result.get("rows") or {}).items():
        stats = each.get("bleu4_stats", {}).get(name) or {}
        found = bootstrap_sums(
            [v for _, v in sorted((int(i), v) for i, v in stats.items())], bleu4_of_sums, seed=seed
        )
        row["bleu4_interval"] = None if found is None else {k: found.as_dict()[k] for k in KEYS}
        cider = each.get("cider_d", {}).get(name) or {}
        row["cider_d_interval"] = interval([values(cider)], seed) if row.get("cider_d") is not None else None
    exact = each.get("exact") or {}
    result["exact_replacement_interval"] = interval([values(exact)], seed) if exact else None
    result["intervals"] = method(seed, over="the substituted images (one group)")
    return result


def compare(a: Mapping[str, Any], b: Mapping[str, Any], seed: int = SEED) -> dict[str, Any]:
    """Paired tests of two substitutivity results on the images both substituted, figure name ->
    test of ``a`` − ``b``: ``exact_replacement`` and ``<row>.cider_d`` (each Table 6 row both kept).
    ``ValueError`` naming why when they keep no per-image data or share no image."""
    for name, r in (("the first", a), ("the second", b)):
        if "per_image" not in r:
            raise ValueError(f"{name} job's result keeps no per-image figures (it predates intervals)")
    pa, pb = a["per_image"], b["per_image"]
    xa, xb = shared(pa.get("exact") or {}, pb.get("exact") or {})
    if not xa:
        raise ValueError("the two results share no substituted image: probe the same probe set and images")
    figures: dict[str, Any] = {"exact_replacement": paired([values(xa)], [values(xb)], seed)}
    for row in ROWS:
        ca, cb = shared((pa.get("cider_d") or {}).get(row) or {}, (pb.get("cider_d") or {}).get(row) or {})
        figures[f"{row}.cider_d"] = paired([values(ca)], [values(cb)], seed) if ca else None
    return {"figures": figures, "intervals": method(seed, over="the substituted images (one group)")}


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
    seed: int | None = None,
) -> dict[str, Any]:
    """Table 6 rows over the images of ``substituted`` (O and S top-1 captions per image id).

    mapping: the S1 -> S2 words substituted; references: ground truth per image; cider: CIDEr-D with
    training document frequencies (``None``: from the references scored); metrics: the scores kept per
    row (``caption_metrics`` names). ``images_with_tails``: the images scored in the Ot vs St row.
    ``per_image``: each image's exact replacement (1/0), and per row its CIDEr-D and BLEU statistics,
    from which ``with_intervals`` draws the intervals — both only with a ``seed`` (the live probe's)."""
    ids = sorted(substituted)
    rows: dict[str, dict[str, float | None]] = {}
    tails: dict[int, tuple[list[str], list[str]]] = {}
    per_cider: dict[str, dict[str, float]] = {}
    per_bleu: dict[str, dict[str, list[int]]] = {}
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
            scorer = cider if cider is not None else CiderD.from_references(refs)
            per_cider[name] = {str(i): v for i, v in scorer.corpus_score(refs, hyps)[1].items()}
            per_bleu[name] = {str(i): v for i, v in bleu4_units(refs, hyps).items()}
    exact = {i: exact_replacement(original[i], substituted[i], mapping) for i in ids}
    same = sum(exact.values())
    result = {
        "images": len(original),
        "substituted": len(ids),
        "words": dict(sorted(mapping.items())),
        "rows": rows,
        "images_with_tails": len(tails),
        "exact_replacement": same / len(ids) if ids else None,
        "exact_replacements": same,
        "examples": [{"image_id": i, "O": original[i], "S": substituted[i]} for i in ids[:8]],
    }
    if seed is None:
        return result
    result["per_image"] = {
        "exact": {str(i): float(v) for i, v in exact.items()},
        "cider_d": per_cider,
        "bleu4_stats": per_bleu,
    }
    return with_intervals(result, seed)


__all__ = [
    "METRICS",
    "ROWS",
    "bleu4_of_sums",
    "bleu4_units",
    "chosen_images",
    "compare",
    "exact_replacement",
    "substituted_tails",
    "substituted_words",
    "substitutivity_result",
    "with_intervals",
]
