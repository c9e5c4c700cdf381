"""The re-ranking operating point of BUTR+RR: how much of the captioner's fluency
(``rerank_weight`` · normalised log-prob) joins the ranker's cosine when B candidates are re-ranked.

Each held-out group's candidates are decoded once (B beams, every one scored by the ranker) and
re-ordered for every weight of a grid (``service.engine.rerank.rerank_order``, the service's own order).
Per weight: mean Recall@5 over the groups on the split's ``test`` set (images whose references mention a
held-out pair) and mean CIDEr-D of the top caption on ``test_no_comb`` (in-distribution images), next to
the plain beam-5 baseline captioner (BUTD) on the same images.

``choose_weight`` picks the weight on a development world (the training world's held-out halves, which
no captioner trained or was selected on): the highest Recall@5 among the weights whose in-distribution
CIDEr-D stays within ``tolerance`` of the baseline's — the quality bound — else the weight
with the best CIDEr-D."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from compcap_lab.studies.evaluate import load_images
from export.data.splits import split_path_for
from export.packaging.decoding import decode, open_engine
from service.engine.engine import CaptionEngine
from service.engine.rerank import rerank_order
from service.evaluation.cider import CiderD
from service.evaluation.recall import CachedPairs, PairsFn, recall_at_k
from service.manifest import load_manifest

DEFAULT_WEIGHTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
SETS = ("test", "test_no_comb")


@dataclass(frozen=True)
class Entry:
    """One held-out group: the re-ranked captioner, its ranker, and the beam-5 baseline captioner."""

    group: int
    captioner: str
    ranker: str
    baseline: str


@dataclass(frozen=True)
class Candidates:
    """Per image of a set: the B finished beams (beam order), their normalised log-probs and cosines."""

    ids: list[int]
    texts: list[list[str]]
    fluency: list[list[float]]
    cosine: list[list[float]]

    def top(self, k: int, weight: float | None) -> dict[int, list[str]]:
        """Image id → the first ``k`` captions re-ranked with ``weight`` (None: beam order)."""
        out = {}
        for i, texts, flu, cos in zip(self.ids, self.texts, self.fluency, self.cosine, strict=True):
            order = range(len(texts)) if weight is None else rerank_order(cos, flu, weight)
            out[i] = [texts[j] for j in list(order)[:k]]
        return out


async def _decode(
    engine: CaptionEngine, images: np.ndarray, captioner: str, ranker: str | None, beam: int
) -> tuple[list[list[str]], list[list[float]], list[list[float]]]:
    params = engine.resolve(model=captioner, beam_size=beam, n_best=beam, rerank=ranker or False)
    texts: list[list[str]] = []
    fluency: list[list[float]] = []
    cosine: list[list[float]] = []
    for per in await decode(engine, images, params, f"candidates {captioner}+{ranker or 'none'}"):
        per = sorted(per, key=lambda c: c.beam_rank)  # beam order; rerank_order re-ranks
        texts.append([c.text for c in per])
        fluency.append([c.normalized_logprob for c in per])
        cosine.append([c.ranker_score or 0.0 for c in per])
    return texts, fluency, cosine


def weight_sweep(
    repo: Path,
    data: Path,
    entries: Sequence[Entry],
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    beam: int = 100,
    *,
    pairs_fn: PairsFn | None = None,
) -> dict[str, Any]:
    """Mean Recall@5 (``test``) and CIDEr-D (``test_no_comb``) over ``entries`` for each weight, for
    the candidates in beam order (``likelihood``: the top 5 of the same B beams by the captioner alone)
    and for the baseline at beam 5. Values are fractions (CIDEr-D unscaled)."""
    from export.data.coco_captions import load_folder
    from export.data.splits import load_split

    if pairs_fn is None:
        from service.text.attachment import AttachmentChecker

        pairs_fn = AttachmentChecker().pairs_batch
    parse = CachedPairs(pairs_fn)
    manifest = load_manifest(repo)
    dataset = load_folder(data)
    per_weight: dict[str, dict[str, list[float]]] = {}

    def add(key: str, metric: str, value: float) -> None:
        per_weight.setdefault(key, {}).setdefault(metric, []).append(value)

    async def run() -> None:
        engine = await open_engine(repo, max_beam_size=max(beam, 5))
        try:
            for entry in tqdm(entries, desc="re-rank weight sweep", unit="group"):
                split = load_split(split_path_for(data, "systematicity", entry.group))
                train = [int(i) for i in split.sets.get("train", [])]
                cider = CiderD.from_references({i: list(dataset.captions[i]) for i in train})
                for set_name in SETS:
                    ids = [int(i) for i in split.sets[set_name]]
                    refs = {i: list(dataset.captions[i]) for i in ids}
                    images = load_images(
                        Path(dataset.root),
                        [dataset.file_names[i] for i in ids],
                        manifest.image.height,
                        manifest.image.width,
                    )
                    cands = Candidates(
                        ids, *await _decode(engine, images, entry.captioner, entry.ranker, beam)
                    )
                    base = Candidates(ids, *await _decode(engine, images, entry.baseline, None, 5))
                    runs = {"baseline": base.top(5, None), "likelihood": cands.top(5, None)}
                    runs.update({f"{w:g}": cands.top(5, w) for w in weights})
                    for key, generated in runs.items():
                        if set_name == "test":
                            report = recall_at_k(generated, refs, list(split.pairs), parse, ks=(5,))
                            add(key, "recall_at_5", float(report.to_dict()["recall_at_k"]["5"]))
                        else:
                            top1 = {i: caps[0] if caps else "" for i, caps in generated.items()}
                            add(key, "cider_d_no_comb", cider.corpus_score(refs, top1)[0])
        finally:
            await engine.close()

    asyncio.run(run())
    return {
        "beam": beam,
        "groups": [e.group for e in entries],
        "rows": {k: {m: float(np.mean(v)) for m, v in metrics.items()} for k, metrics in per_weight.items()},
    }


def choose_weight(sweep: dict[str, Any], tolerance: float = 0.10) -> float:
    """The weight with the highest Recall@5 among those whose in-distribution CIDEr-D is at least
    ``(1 - tolerance)`` × the baseline's; if none is, the weight with the highest CIDEr-D."""
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    rows = sweep["rows"]
    floor = (1.0 - tolerance) * rows["baseline"]["cider_d_no_comb"]
    weighted = {float(k): v for k, v in rows.items() if k not in ("baseline", "likelihood")}
    if not weighted:
        raise ValueError("the sweep has no weighted rows")
    within = [w for w, v in weighted.items() if v["cider_d_no_comb"] >= floor]
    if within:
        return max(within, key=lambda w: (weighted[w]["recall_at_5"], -w))
    return max(weighted, key=lambda w: weighted[w]["cider_d_no_comb"])


__all__ = ["DEFAULT_WEIGHTS", "Candidates", "Entry", "choose_weight", "weight_sweep"]
