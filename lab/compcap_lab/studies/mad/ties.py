"""The MAD study (Wan et al., 2022; ``compcap-lab mad``, ``compcap_lab.studies.mad.study``), step 8: the
ties at S = 0.

Short captions rarely share a 4-gram, so S = 0 for many images and the k-th image of D_ij is often one of
many at S = 0: then the tie-break, not S, decides D_ij. Per pair, the images at S = 0 (count and share of
R) and whether the tie-break decides; then every pair's D_ij is selected again with alternative
tie-breaks (the secondary key reversed; seeded random orders of the tied images), p and q recomputed at
the largest k with the same referee, and each alternative ranking compared with the reported one
(Spearman's ρ, same top and bottom configuration). ``tie_break_study`` does all of it on a finished
study; ``ties_from_selection`` what the stored selections alone say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compcap_lab.studies.mad.scoring import FLOOR, Referee, nan_none, pair_means, pair_profiles
from service.checks import within
from service.compare.ngsm import discrepancy_order
from service.compare.ranking import dominance_matrix, perron_vector, ranking, spearman

TIE_SEEDS = tuple(range(10))  # the seeded random tie-breaks of ``tie_break_study``


def tie_counts(similarity: Sequence[float], selected: Sequence[int]) -> dict[str, Any]:
    """How far S alone decides one pair's selection. ``similarity`` [N]: S of every pool image;
    ``selected`` [k]: D_ij's indices into it, most discrepant first.

    Returns ``pool`` (N), ``k``, ``zero`` (images of the pool with S = 0), ``zero_share`` (zero / N),
    ``selected_zero`` (of D_ij), ``boundary_s`` (S of D_ij's k-th image), ``boundary_tied`` (pool images
    with that S), ``boundary_selected`` (of them in D_ij) and ``by_tie_break``: whether more images tie
    at the boundary than D_ij takes, so that the tie-break, not S, decides which of them are in D_ij."""
    s = np.asarray(similarity, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"similarity must be 1-D, got shape {s.shape}")
    if not selected or len(selected) > len(s):
        raise ValueError(f"selected must hold 1..{len(s)} indices, got {len(selected)}")
    chosen = s[np.asarray(selected, dtype=np.int64)]
    boundary = float(chosen[-1])
    tied, taken = int(np.sum(s == boundary)), int(np.sum(chosen == boundary))
    return {
        "pool": len(s),
        "k": len(selected),
        "zero": int(np.sum(s == 0.0)),
        "zero_share": float(np.mean(s == 0.0)),
        "selected_zero": int(np.sum(chosen == 0.0)),
        "boundary_s": boundary,
        "boundary_tied": tied,
        "boundary_selected": taken,
        "by_tie_break": tied > taken,
    }


def selection_ties(similarity: Sequence[float], tie: Sequence[float]) -> dict[str, Any]:
    """What a stored selection alone says (no pool captions): ``similarity`` [k] and ``tie`` [k] are
    D_ij's S and mean NGSM_n, most discrepant first. Returns ``k``, ``selected_zero`` (S = 0 in D_ij),
    ``selected_zero_share``, ``shared_nothing`` (mean NGSM_n = 0: not one word in common) and
    ``boundary_tie`` (the k-th image's mean NGSM_n: the tie-break value at which D_ij was cut)."""
    s, t = np.asarray(similarity, dtype=np.float64), np.asarray(tie, dtype=np.float64)
    if s.ndim != 1 or s.shape != t.shape or len(s) == 0:
        raise ValueError(f"similarity and tie must be 1-D of equal length >= 1, got {s.shape}, {t.shape}")
    return {
        "k": len(s),
        "selected_zero": int(np.sum(s == 0.0)),
        "selected_zero_share": float(np.mean(s == 0.0)),
        "shared_nothing": int(np.sum((s == 0.0) & (t == 0.0))),
        "boundary_tie": float(t[-1]),
    }


def tie_break_labels(seeds: Sequence[int] = TIE_SEEDS) -> list[str]:
    """The alternative tie-breaks: ``reverse`` and one ``random:<seed>`` per seed."""
    return ["reverse", *(f"random:{seed}" for seed in seeds)]


def alternative_selection(
    profiles: Sequence[tuple[float, float]], keys: Sequence[int], k: int, label: str, pair_index: int = 0
) -> list[int]:
    """D_ij [k] (indices into ``profiles`` [N] of (S, mean NGSM_n), most discrepant first) with S
    ascending as in Eq. 6 but another order among equal S: ``reported`` = ``discrepancy_order`` (mean
    NGSM_n ascending, then key); ``reverse`` = mean NGSM_n descending, then key; ``random:<seed>`` = a
    random order drawn from numpy's generator seeded with (seed, ``pair_index``), so that each pair
    gets its own order and a seed names the same orders on every run. ``keys`` [N] as for
    ``discrepancy_order``."""
    within(1, len(profiles), k=k)
    if label == "reported":
        return discrepancy_order(profiles, keys)[:k]
    if label == "reverse":
        return discrepancy_order([(s, -m) for s, m in profiles], keys)[:k]
    kind, _, seed = label.partition(":")
    if kind != "random" or not seed.isdigit():
        raise ValueError(f"unknown tie-break {label!r} (reported, reverse or random:<seed>)")
    draws = np.random.default_rng([int(seed), pair_index]).random(len(profiles))
    return discrepancy_order([(s, float(u)) for (s, _), u in zip(profiles, draws, strict=True)], keys)[:k]


def compare_ranking(
    names: Sequence[str], q_reported: Sequence[float], p: np.ndarray, floor: float = FLOOR
) -> dict[str, Any]:
    """One alternative's ranking against the reported one: ``q_reported`` [m] (the reported Perron
    vector, in ``names`` [m] order) and ``p`` [m, m] (the alternative selection's scores, as in
    ``compcap_lab.studies.mad.study.derive``). Returns the alternative's ``q`` (per name) and ``ranking``,
    ``spearman`` (ρ of the two q; None when undefined), ``same`` (the same ranking) and ``top_same`` /
    ``bottom_same`` (the same first / last name)."""
    q, _ = perron_vector(dominance_matrix(np.asarray(p, dtype=np.float64), floor))
    order, reported = ranking(q, names), ranking(np.asarray(q_reported, dtype=np.float64), names)
    return {
        "q": dict(zip(names, q.tolist(), strict=True)),
        "ranking": order,
        "spearman": nan_none(spearman(q.tolist(), list(q_reported))),
        "same": order == reported,
        "top_same": order[0] == reported[0],
        "bottom_same": order[-1] == reported[-1],
    }


def sensitivity_summary(compared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Over the alternatives of one metric (``compare_ranking``'s results by label): ``alternatives``
    (how many), ``min_spearman`` / ``median_spearman`` (over the defined ρ; None when none is),
    ``identical`` (alternatives giving the reported ranking), ``top_changed`` and ``bottom_changed``."""
    rhos = [r["spearman"] for r in compared.values() if r["spearman"] is not None]
    return {
        "alternatives": len(compared),
        "min_spearman": min(rhos) if rhos else None,
        "median_spearman": float(np.median(rhos)) if rhos else None,
        "identical": sum(r["same"] for r in compared.values()),
        "top_changed": sum(not r["top_same"] for r in compared.values()),
        "bottom_changed": sum(not r["bottom_same"] for r in compared.values()),
    }


def tie_break_study(
    core: dict[str, Any],
    captions: dict[str, list[str]],
    keys: Sequence[int],
    referee: Referee | None,
    seeds: Sequence[int] = TIE_SEEDS,
) -> dict[str, Any]:
    """The module docstring's analysis of a finished study ``core`` (``names``, ``k``, ``pairs``,
    ``results``) and every configuration's ``captions`` [N] of the pool (image ``keys`` [N]).

    ``pairs``: per pair, ``tie_counts`` and ``selection_ties``, and ``overlap``: per alternative
    tie-break, how many of D_ij's k images it selects too. ``by_tie_break``: pairs whose D_ij the
    tie-break decides. With a ``referee``, ``rankings[metric][label]`` = ``compare_ranking`` of the
    ranking from p recomputed at k on every pair's alternative D_ij, and ``summary[metric]`` =
    ``sensitivity_summary``; without one both are empty."""
    names, k = core["names"], core["k"]
    labels = tie_break_labels(seeds)
    pairs: list[dict[str, Any]] = []
    alternative_pairs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for n, pair in enumerate(core["pairs"]):
        profiles = pair_profiles(captions[pair["a"]], captions[pair["b"]])
        chosen = set(pair["indices"])
        row: dict[str, Any] = {
            "a": pair["a"],
            "b": pair["b"],
            **tie_counts([s for s, _ in profiles], pair["indices"]),
            **selection_ties(pair["similarity"], pair["tie"]),
            "overlap": {},
        }
        for label in labels:
            indices = alternative_selection(profiles, keys, k, label, n)
            row["overlap"][label] = len(chosen.intersection(indices))
            alternative_pairs[label].append({"a": pair["a"], "b": pair["b"], "indices": indices})
        pairs.append(row)
    out: dict[str, Any] = {
        "seeds": list(seeds),
        "labels": labels,
        "pairs": pairs,
        "by_tie_break": sum(p["by_tie_break"] for p in pairs),
        "rankings": {},
        "summary": {},
    }
    if referee is None or not core.get("results"):
        return out
    m, metrics = len(names), list(core["results"])
    compared: dict[str, dict[str, dict[str, Any]]] = {e: {} for e in metrics}
    for label in labels:
        p = {e: np.zeros((m, m)) for e in metrics}
        for pair in alternative_pairs[label]:
            i, j = names.index(pair["a"]), names.index(pair["b"])
            for e, by_k in pair_means(referee, captions, pair, [k]).items():
                p[e][i, j], p[e][j, i] = by_k[k]
        for e in metrics:
            q_reported = [core["results"][e]["q"][name] for name in names]
            compared[e][label] = compare_ranking(names, q_reported, p[e])
    out["rankings"] = compared
    out["summary"] = {e: sensitivity_summary(compared[e]) for e in metrics}
    return out


def ties_from_selection(core: dict[str, Any], reason: str) -> dict[str, Any]:
    """``tie_break_study``'s shape from the stored selections alone (``core["pairs"]``' ``similarity``
    and ``tie`` [k]), for a study whose pool captions are gone: per pair ``selection_ties``; the pool
    counts, ``by_tie_break`` and the rankings are absent (None / empty) and ``reason`` says why."""
    return {
        "seeds": [],
        "labels": [],
        "pairs": [
            {"a": p["a"], "b": p["b"], **selection_ties(p["similarity"], p["tie"])} for p in core["pairs"]
        ],
        "by_tie_break": None,
        "rankings": {},
        "summary": {},
        "not_recomputed": reason,
    }
