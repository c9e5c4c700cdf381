"""``CompareService``: caption the same images with two or more configurations through the engine's
shared batch and order the images by how much the configurations disagree (``POST /v1/compare``).

Every configuration is resolved first (a bad one fails the request before any decoding, with the
configuration named in the field); then all configurations decode at once, at background priority, so
a comparison fills the rows caption users leave. Per image: each configuration's best caption, the
pairwise NGSM matrix and its smallest pair; images most discrepant first (``discrepancy_order``).
At most ``max_concurrent`` comparisons run at once (the kit's ``BoundedGate``: ``BusyError`` → 429 beyond)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from service.api.gate import BoundedGate
from service.checks import at_least
from service.compare.configs import Configuration, check_unique
from service.compare.ngsm import discrepancy_order, ngsm_orders, ngsm_profile
from service.engine.client import EngineClient
from service.engine.params import EngineError, SearchParams
from service.engine.request import Priority


def resolve_all(engine: EngineClient, configs: Sequence[Configuration]) -> list[SearchParams]:
    """Each configuration's ``SearchParams``; the ``EngineError`` of the first bad one, its field
    prefixed with ``configurations.i.`` and its message with the configuration's name."""
    check_unique(configs)
    out = []
    for i, config in enumerate(configs):
        try:
            out.append(engine.resolve(**config.options))
        except EngineError as exc:
            exc.field = f"configurations.{i}.{exc.field}"
            exc.message = f"{config.name}: {exc.message}"
            exc.args = (exc.message,)
            raise
    return out


def compare_captions(names: Sequence[str], captions: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """``captions[c][i]``: configuration c's caption of image i → per image (in input order) the
    captions by name, every pair's NGSM with its per-order NGSM_n (n = 1..4) and the most discrepant
    pair."""
    per_image = []
    for i in range(len(captions[0])):
        by_name = {n: captions[c][i] for c, n in enumerate(names)}
        pairs = []
        for a, b in itertools.combinations(range(len(names)), 2):
            s, tie = ngsm_profile(captions[a][i], captions[b][i])
            orders = ngsm_orders(captions[a][i], captions[b][i])
            pairs.append({"a": names[a], "b": names[b], "ngsm": s, "tie_break": tie, "orders": orders})
        lowest = min(pairs, key=lambda p: (p["ngsm"], p["tie_break"]))
        per_image.append(
            {
                "index": i,
                "captions": by_name,
                "pairs": pairs,
                "min_ngsm": lowest["ngsm"],
                "min_tie_break": lowest["tie_break"],
                "most_discrepant_pair": [lowest["a"], lowest["b"]],
            }
        )
    return per_image


class CompareService:
    def __init__(self, max_concurrent: int = 2) -> None:
        at_least(1, max_concurrent=max_concurrent)
        self.max_concurrent = max_concurrent
        self.gate = BoundedGate(
            max_concurrent, "too_many_comparisons", "{limit} comparisons are running; retry later"
        )

    async def compare(
        self, engine: EngineClient, images: np.ndarray, configs: Sequence[Configuration]
    ) -> dict[str, Any]:
        """Compare ``configs`` on uint8 [B, H, W, 3] ``images`` (module docstring)."""
        params = resolve_all(engine, configs)
        start = time.perf_counter()
        async with self.gate.hold():
            outs = await asyncio.gather(
                *(engine.caption(images, p, priority=Priority.BACKGROUND) for p in params)
            )
        names = [c.name for c in configs]
        captions = [[per[0].text if per else "" for per in out.results] for out in outs]
        per_image = compare_captions(names, captions)
        order = discrepancy_order([(p["min_ngsm"], p["min_tie_break"]) for p in per_image])
        return {
            "configurations": [
                {**c.to_json(), "resolved": {"model": p.model, "beam_size": p.beam_size, "ranker": p.ranker}}
                for c, p in zip(configs, params, strict=True)
            ],
            "images": [per_image[i] for i in order],
            "timings_ms": {
                "decode": (time.perf_counter() - start) * 1e3,
                **{
                    f"decode_{c.name}": out.timings_ms.get("decode", 0.0)
                    for c, out in zip(configs, outs, strict=True)
                },
            },
        }


__all__ = ["CompareService", "compare_captions", "resolve_all"]
