"""Scoring shared by the MAD study (``compcap_lab.studies.mad.study``) and its tie-break analysis
(``compcap_lab.studies.mad.ties``): the NGSM profile of a pair, the referee's per-image scores, p on a
selection, and the dominance matrix's floor."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compcap_lab.studies.mad.pool import MadError, Pool
from service.compare.ngsm import ngsm_profile

FLOOR = 1e-3


def pair_profiles(a: Sequence[str], b: Sequence[str]) -> list[tuple[float, float]]:
    """``ngsm_profile`` of two configurations' captions [N] image by image: [N] (S, mean NGSM_n)."""
    return [ngsm_profile(x, y) for x, y in zip(a, b, strict=True)]


class Referee:
    """Per-image scores of a caption on image ``index`` of ``pool``, cached: CIDEr-D (document
    frequencies from the pool's references) and, with scene graphs, tuple F1."""

    def __init__(self, pool: Pool) -> None:
        if pool.references is None:
            raise MadError(
                "this pool has no references to referee against (--no-referee stops after selection)"
            )
        from service.evaluation.cider import CiderD

        self.pool = pool
        self.cider = CiderD.from_references(pool.references)
        self.metrics = ["cider_d"] + (["tuple_f1"] if pool.scenes is not None else [])
        self._cache: dict[tuple[str, str, int], float] = {}

    def score(self, metric: str, caption: str, index: int) -> float:
        key = (metric, caption, index)
        if key not in self._cache:
            if metric == "cider_d":
                assert self.pool.references is not None
                value = self.cider.score(caption, self.pool.references[index])
            else:
                from service.evaluation.tuples import caption_tuple_f1

                assert self.pool.scenes is not None
                value = caption_tuple_f1(caption, self.pool.scenes[index])["f1"]
            self._cache[key] = float(value)
        return self._cache[key]


def pair_means(
    referee: Referee, captions: dict[str, list[str]], pair: dict[str, Any], ks: Sequence[int]
) -> dict[str, dict[int, tuple[float, float]]]:
    """Per metric and k: (p[a, b], p[b, a]), the means of a's and b's scores on D_ab's first k images."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for metric in referee.metrics:
        sa = [referee.score(metric, captions[pair["a"]][i], i) for i in pair["indices"]]
        sb = [referee.score(metric, captions[pair["b"]][i], i) for i in pair["indices"]]
        out[metric] = {k: (float(np.mean(sa[:k])), float(np.mean(sb[:k]))) for k in ks}
    return out


def nan_none(x: float) -> float | None:
    """``x``, or None for NaN (JSON has no NaN)."""
    return None if math.isnan(x) else x
