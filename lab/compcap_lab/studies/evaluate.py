"""``compcap-lab evaluate``: compositional generalisation, caption quality and diversity of every captioner
of a model repository on one split, decoded through the service's own engine on the embedded
onnxruntime backend (what users get).

For each captioner there is one run without re-ranking and, when a ranker applies, one run re-ranked
by it: the captioner's own ranker (``captioner.ranker``, e.g. BUTR+RR), or ``vsepp`` when the
captioner has none and the repository has one. Each run decodes the split's evaluation images with
beam search, ``n_best = beam_size`` captions per image in final order (ranker order when re-ranked):

- Recall@1..5 of the split's held-out pairs (Nikolaus et al., 2019, Eq. 1) on the top-K captions, with the
  "at least b references" buckets and the Table 3 categories (``service.evaluation.recall``) —
  only for splits that hold pairs out (systematicity); otherwise the recall fields are ``null``;
- BLEU-1/4, METEOR, ROUGE-L, CIDEr-D of the top-1 caption (``service.evaluation.metrics``), CIDEr-D
  with document frequencies from the split's *training* references;
- ASL, Types, TTR1, TTR2, %Novel of the top-1 captions against the training captions
  (``service.evaluation.diversity``; ``novel`` is a fraction).

Data layout: ``--data DIR`` is a COCO-format dataset folder (``export.data.coco_captions.load_folder``); the
split is read from ``<data>/splits/<kind>/split.json``, or ``<data>/splits/<kind>_<group>/split.json``
when a group is given (e.g. ``splits/systematicity_1/split.json``; ``export.data.splits.split_path_for``,
where ``compcap-lab splits`` writes by default), unless a split path is passed.
Images are decoded and resized to the manifest's input size with ``service.images.decode.decode_image``.

Decoding is pluggable: in process from ``--repo`` (``export.packaging.decoding``), or over HTTP by a deployed
gateway with ``--url`` (``compcap_lab.studies.remote``: the runs from its ``GET /v1/models``, the image files
sent as they are, a resumable JSON-lines checkpoint). Both give the same captions for the same options
(``run_options``) and go through the same scoring below, so the JSON is the same.

The JSON written (and returned)::

    {"split": kind, "group": group, "images": N,
     "results": [{"captioner": ..., "ranker": ... | null, "trained_on": ...,
                  "recall_at_k": {"1": r, ..., "5": r} | null, "recall_at_5_mean": r | null,
                  "per_pair": {label: {..., "images": n, "hits": {"1": h, ...},
                               "first_rank": {image id: first rank holding the pair | null}}} | null,
                  "by_bucket": {...} | null, "per_category": {...} | null,
                  "bleu1": x, "bleu4": x, "meteor": x | null, "rouge_l": x, "cider_d": x,
                  "asl": x, "types": n, "ttr1": x, "ttr2": x, "novel": x}, ...]}

METEOR needs Java; without it ``meteor`` is ``null`` and a warning says so.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from compcap_lab.studies.runs import run_options
from export.data.splits import split_path_for
from export.packaging.decoding import decode, open_engine
from export.packaging.runs import Catalogue, runs_for
from service.engine.engine import CaptionEngine
from service.engine.params import EngineError
from service.evaluation.cider import CiderD
from service.evaluation.diversity import diversity, training_index
from service.evaluation.metrics import caption_metrics, java_available
from service.evaluation.recall import CachedPairs, PairsFn, recall_at_k
from service.images.decode import decode_image
from service.manifest import load_manifest

KS = (1, 2, 3, 4, 5)
_ROUND = 6


def load_images(root: Path, file_names: Sequence[str], height: int, width: int) -> np.ndarray:
    """uint8 [N, height, width, 3] from image files under ``root`` (resized when needed)."""
    out = np.empty((len(file_names), height, width, 3), dtype=np.uint8)
    for n, name in enumerate(tqdm(file_names, desc="load images", unit="img", leave=False)):
        path = Path(root) / name
        data = path.read_bytes()
        out[n] = decode_image(
            data, height, width, max_bytes=max(len(data), 1), max_pixels=1 << 30, label=str(path)
        )
    return out


async def _decode(
    engine: CaptionEngine,
    images: np.ndarray,
    captioner: str,
    ranker: str | None,
    beam_size: int,
    rerank_beam_size: int,
    rerank_weight: float,
) -> list[list[str]]:
    """Top ``beam_size`` captions per image in final order (``run_options``)."""
    params = engine.resolve(
        model=captioner, **run_options(ranker, beam_size, rerank_beam_size, rerank_weight)
    )
    captions = await decode(engine, images, params, f"decode {captioner}+{ranker or 'none'}")
    return [[c.text for c in per] for per in captions]


async def _decode_all(
    repo: Path,
    images: np.ndarray,
    runs: Sequence[tuple[str, str | None]],
    beam_size: int,
    rerank_beam_size: int,
    rerank_weight: float,
) -> list[list[list[str]]]:
    async with await open_engine(repo, max_beam_size=max(beam_size, rerank_beam_size)) as engine:
        return [
            await _decode(engine, images, cap, rk, beam_size, rerank_beam_size, rerank_weight)
            for cap, rk in runs
        ]


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), _ROUND)


def _round_tree(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, _ROUND)
    if isinstance(obj, dict):
        return {k: _round_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round_tree(v) for v in obj]
    return obj


def _default_pairs_fn() -> PairsFn:
    from service.text.attachment import AttachmentChecker

    checker = AttachmentChecker()
    return checker.pairs_batch


def evaluate(
    repo: Path | None,
    data: Path,
    split_path: Path | None,
    kind: str,
    group: int | None,
    json_out: Path | None,
    set_name: str = "test",
    beam_size: int = 5,
    limit: int | None = None,
    *,
    pairs_fn: PairsFn | None = None,
    captioners: Sequence[str] | None = None,
    runs: Sequence[tuple[str, str | None]] | None = None,
    meteor: bool = True,
    rerank_beam_size: int = 100,
    rerank_weight: float = 0.0,
    fallback_ranker: bool = True,
    url: str | None = None,
    concurrency: int = 8,
    checkpoint: Path | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Evaluate every captioner of ``repo`` on set ``set_name`` of a split of the dataset in ``data``.

    ``limit`` keeps the first N evaluation images; ``pairs_fn`` replaces the spaCy attachment checker
    (``service.text.attachment.AttachmentChecker().pairs_batch``); ``json_out`` also writes the result;
    ``captioners`` restricts the runs to those captioners (default: all); ``runs`` gives the (captioner,
    ranker or None) runs instead, any ranker with any captioner (e.g. BUTD re-ranked by VSE++, the
    report's control); ``meteor=False`` skips METEOR
    (a Java start per run). Re-ranked runs re-rank ``rerank_beam_size`` beams (100, as the authors' own
    BUTR+RR evaluation) by ranker cosine + ``rerank_weight`` × normalised log-prob (0: the ranker alone).

    ``url``: decode over HTTP on the gateway there instead of in process from ``repo`` (which is then
    not read): the runs come from its ``GET /v1/models``, each image file is sent as it is (the gateway
    decodes and resizes it as ``load_images`` does), ``concurrency`` requests at once, and
    ``checkpoint`` (a JSON-lines file) keeps every finished image so that a rerun resumes
    (``compcap_lab.studies.remote``). The result is the same JSON as in process."""
    from export.data.coco_captions import load_folder
    from export.data.splits import load_split

    if (repo is None) == (url is None):
        raise ValueError("give either a model repository or a gateway url")
    data = Path(data)
    split_file = Path(split_path) if split_path is not None else split_path_for(data, kind, group)
    if not split_file.is_file():
        raise FileNotFoundError(f"split file not found: {split_file}")
    split = load_split(split_file)
    if set_name not in split.sets:
        raise KeyError(f"split {split_file} has no set {set_name!r}; sets: {', '.join(sorted(split.sets))}")
    dataset = load_folder(data)
    eval_ids = [int(i) for i in split.sets[set_name]]
    if limit is not None:
        eval_ids = eval_ids[:limit]
    if not eval_ids:
        raise ValueError(f"set {set_name!r} of {split_file} is empty")
    train_ids = [int(i) for i in split.sets.get("train", [])]

    references = {i: list(dataset.captions[i]) for i in eval_ids}
    train_refs = {i: list(dataset.captions[i]) for i in train_ids if dataset.captions.get(i)}
    if not train_refs:
        print(
            "warning: the split has no training references; CIDEr-D DF from the evaluation references",
            file=sys.stderr,
        )
    cider = CiderD.from_references(train_refs or references)
    novel_index = training_index(c for caps in train_refs.values() for c in caps) if train_refs else None
    held_out = list(split.pairs)
    if not java_available():
        print("warning: java not found: METEOR is null", file=sys.stderr)

    names = [dataset.file_names[i] for i in eval_ids]
    if url is not None:
        from compcap_lab.studies import remote

        catalogue = remote.gateway_catalogue(url, api_key)
    else:
        assert repo is not None
        repo = Path(repo)
        manifest = load_manifest(repo)
        catalogue = Catalogue.of(manifest)
    if runs is not None:
        runs = list(dict.fromkeys(runs))
        for cap, ranker in runs:
            if cap not in {c for c, _, _ in catalogue.captioners}:
                raise ValueError(f"runs: {cap!r} is not a captioner of {repo or url}")
            if ranker is not None and ranker not in catalogue.rankers:
                raise ValueError(f"runs: {ranker!r} is not a ranker of {repo or url}")
    else:
        runs = [r for r in catalogue.runs(fallback_ranker) if captioners is None or r[0] in captioners]
    if not runs:
        raise ValueError(f"none of {list(captioners or [])} is a captioner of {repo or url}")
    if url is not None:
        decoded = remote.decode_remote(
            url,
            [(i, Path(dataset.root) / name) for i, name in zip(eval_ids, names, strict=True)],
            runs,
            beam_size,
            rerank_beam_size,
            rerank_weight,
            concurrency=concurrency,
            checkpoint=checkpoint,
            api_key=api_key,
        )
    else:
        assert repo is not None
        images = load_images(Path(dataset.root), names, manifest.image.height, manifest.image.width)
        decoded = asyncio.run(_decode_all(repo, images, runs, beam_size, rerank_beam_size, rerank_weight))

    parse: PairsFn | None = None
    if held_out:
        parse = CachedPairs(pairs_fn if pairs_fn is not None else _default_pairs_fn())

    results: list[dict[str, Any]] = []
    for (captioner, ranker), texts in tqdm(list(zip(runs, decoded, strict=True)), desc="score", unit="run"):
        generated = dict(zip(eval_ids, texts, strict=True))
        top1 = {i: caps[0] if caps else "" for i, caps in generated.items()}
        row: dict[str, Any] = {
            "captioner": captioner,
            "ranker": ranker,
            "trained_on": catalogue.trained_on(captioner),
            "recall_at_k": None,
            "recall_at_5_mean": None,
            "per_pair": None,
            "by_bucket": None,
            "per_category": None,
        }
        if parse is not None:
            recall = recall_at_k(generated, references, held_out, parse, ks=KS)
            report = recall.to_dict()
            for label, pair in recall.per_pair.items():  # which image was hit: for paired tests
                report["per_pair"][label]["first_rank"] = {str(i): r for i, r in pair.first_rank.items()}
            row.update(
                recall_at_k=_round_tree(report["recall_at_k"]),
                recall_at_5_mean=_r(report["recall_at_k"]["5"]),
                per_pair=_round_tree(report["per_pair"]),
                by_bucket=_round_tree(report["by_bucket"]),
                per_category=_round_tree(report["per_category"]),
            )
        scores = caption_metrics(references, top1, cider=cider, meteor=meteor)
        div = diversity(list(top1.values()), novel_index)
        row.update(
            bleu1=_r(scores.bleu1),
            bleu4=_r(scores.bleu4),
            meteor=_r(scores.meteor),
            rouge_l=_r(scores.rouge_l),
            cider_d=_r(scores.cider_d),
            asl=_r(div.asl),
            types=div.types,
            ttr1=_r(div.ttr1),
            ttr2=_r(div.ttr2),
            novel=_r(div.novel),
        )
        results.append(row)

    out = {
        "split": kind,
        "group": group,
        "images": len(eval_ids),
        "beam_size": beam_size,
        "rerank_beam_size": rerank_beam_size,
        "rerank_weight": rerank_weight,
        "results": results,
    }
    if json_out is not None:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return out


def _fmt(x: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"


def run_evaluate_cli(
    repo: Path | None,
    data: Path,
    split_path: Path | None,
    kind: str,
    group: int | None,
    json_out: Path | None,
    set_name: str = "test",
    rerank_beam_size: int = 100,
    rerank_weight: float = 0.0,
    limit: int | None = None,
    meteor: bool = True,
    url: str | None = None,
    concurrency: int = 8,
    checkpoint: Path | None = None,
    api_key: str | None = None,
) -> int:
    """``compcap-lab evaluate (--repo DIR | --url URL) --data DIR --split KIND [--group N] --json OUT``:
    evaluate and print a summary table (recall R@1, R@5 as fractions in [0, 1], as the API reports it; the
    caption metrics ×100 as in the tables of Nikolaus et al., 2019, CIDEr-D ×100). Returns the exit
    code."""
    from compcap_client import CompCapError

    try:
        out = evaluate(
            repo,
            data,
            split_path,
            kind,
            group,
            json_out,
            set_name=set_name,
            limit=limit,
            meteor=meteor,
            rerank_beam_size=rerank_beam_size,
            rerank_weight=rerank_weight,
            url=url,
            concurrency=concurrency,
            checkpoint=checkpoint,
            api_key=api_key,
        )
    except (FileNotFoundError, KeyError, ValueError, EngineError) as exc:
        print(f"compcap-lab evaluate: {exc}", file=sys.stderr)
        return 2
    except CompCapError as exc:
        resume = f"; {checkpoint} keeps what was done: run again to resume" if checkpoint else ""
        print(f"compcap-lab evaluate: the gateway at {url}: {exc}{resume}", file=sys.stderr)
        return 1
    title = f"{kind}" + (f" group {group}" if group is not None else "") + f", {out['images']} images"
    print(title)
    print("recall R@1, R@5: fractions in [0, 1]; B1..C-D and Nov%: x100")
    header = f"{'model':<18}{'trained_on':<18}{'R@1':>7}{'R@5':>7}{'B1':>6}{'B4':>6}{'M':>6}{'R-L':>6}"
    header += f"{'C-D':>7}{'ASL':>6}{'Types':>6}{'TTR1':>6}{'TTR2':>6}{'Nov%':>6}"
    print(header)
    for r in out["results"]:
        name = r["captioner"] + (f"+{r['ranker']}" if r["ranker"] else "")
        rk = r["recall_at_k"] or {}
        print(
            f"{name:<18}{r['trained_on']:<18}{_fmt(rk.get('1'), digits=3):>7}{_fmt(rk.get('5'), digits=3):>7}"
            f"{_fmt(r['bleu1'], 100):>6}{_fmt(r['bleu4'], 100):>6}{_fmt(r['meteor'], 100):>6}"
            f"{_fmt(r['rouge_l'], 100):>6}{_fmt(r['cider_d'], 100):>7}{_fmt(r['asl']):>6}{r['types']:>6}"
            f"{r['ttr1']:>6.2f}{r['ttr2']:>6.2f}{_fmt(r['novel'], 100):>6}"
        )
    if json_out is not None:
        print(f"wrote {json_out}")
    return 0


__all__ = ["Catalogue", "evaluate", "load_images", "run_evaluate_cli", "run_options", "runs_for"]
