"""The grounding study of Cornia et al. (2022) on SceneWorld (``compcap-lab explain-report``): on N held-out
images with exact scene graphs, every captioner explains its own caption with every method through the served
path (``service.explain.ExplainService`` on a ``CaptionEngine``), and the study reports

- GroundingScore(δ), δ ∈ {0, 1, 3, 5, ∞}, per captioner × method (the shape of Cornia et al., 2022, Table 3);
- caption quality with noun alignment (Needleman–Wunsch against each reference, averaged) and soft
  coverage of the scene graph's object classes (the shape of Cornia et al., 2022, Table 1; METEOR left out:
  Java);
- the pointing game: a noun's argmax cell centre inside a box of the object it names, against the chance
  that a random cell's centre is (computed exactly per noun, not sampled);
- integrated gradients' completeness (mean |δ_conv| / |S_w(x) − S_w(0)|) at ``n_steps`` and at 20;
- cost: ms per explained word per method, and the attention observer's share of caption latency
  (the same images captioned with and without it, interleaved);
- a figure of per-word heat maps for one image per captioner.

``compcap-lab explain-report --repo model_zoo [--images 500] [--out reports]``"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from compcap_lab.studies.evaluate import load_images
from export.data.coco_captions import load_folder
from export.packaging.decoding import open_engine
from service.checks import at_least
from service.engine.engine import CaptionEngine
from service.engine.request import Priority
from service.evaluation.intervals import bootstrap_interval
from service.evaluation.metrics import caption_metrics
from service.explain.attention import AttentionRecorder
from service.explain.grounding import coverage, needleman_wunsch
from service.explain.service import METHODS, ExplainInput, ExplainService
from service.manifest import Manifest, load_manifest
from service.text.lexicon import default_lexicon
from service.text.vocabulary import Vocabulary, tokenize

DELTA_KEYS = ("0", "1", "3", "5", "inf")
ARCH_ORDER = ("BUTD", "BUTR", "SAT", "Transformer", "M2")


def default_captioners(manifest: Manifest, group: int = 1) -> list[str]:
    """One captioner per architecture, of held-out group ``group`` where the zoo has one."""
    chosen: dict[str, str] = {}
    for cap in manifest.captioners:
        arch = cap.architecture
        if arch not in chosen or cap.name.endswith(f"_g{group}"):
            chosen[arch] = cap.name
    return [chosen[a] for a in sorted(chosen, key=lambda a: ARCH_ORDER.index(a) if a in ARCH_ORDER else 99)]


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def summarise(explained: list[dict[str, Any]]) -> dict[str, Any]:
    """One captioner × method: mean GroundingScore per δ over captions with nouns, pointing game, cost,
    IG completeness. ``explained``: ``ExplainService`` results (with scene graphs)."""
    scores = [e["grounding_score"] for e in explained if e["grounding_score"] is not None]
    pointing = [w["pointing"] for e in explained for w in e["words"] if w.get("pointing") is not None]
    chance = [w["pointing_chance"] for e in explained for w in e["words"] if w.get("pointing") is not None]
    words = sum(len(e["words"]) for e in explained)
    gs_intervals = {k: bootstrap_interval([[s[k] for s in scores]]) for k in DELTA_KEYS}
    pointing_interval = bootstrap_interval([[float(p) for p in pointing]])
    out: dict[str, Any] = {
        "captions": len(explained),
        "captions_with_nouns": len(scores),
        "grounding_score": {k: _mean([s[k] for s in scores]) for k in DELTA_KEYS},
        # 95% bootstrap over captions (each caption's GroundingScore a mean over its nouns)
        "grounding_score_interval": {k: None if v is None else v.as_dict() for k, v in gs_intervals.items()},
        "pointing": {
            "nouns": len(pointing),
            "accuracy": _mean(pointing),
            "chance": _mean(chance),
            "interval": None if pointing_interval is None else pointing_interval.as_dict(),  # over nouns
        },
        "ms_per_word": statistics.median(e["timings_ms"]["per_word"] for e in explained),  # first: loading
        "words": words,
    }
    ig = [e["integrated_gradients"] for e in explained if "integrated_gradients" in e]
    if ig:
        out["ig_relative_delta"] = float(np.mean([r for i in ig for r in _relative(i)]))
        out["ig_n_steps"] = ig[0]["n_steps"]
    return out


def _relative(ig: dict[str, Any]) -> list[float]:
    return [abs(d) / max(abs(g), 1e-12) for d, g in zip(ig["delta"], ig["score_gap"], strict=True)]


def quality(
    captions: dict[int, str], references: dict[int, list[str]], scenes: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """The columns of Cornia et al. (2022), Table 1 (BLEU-1/4, ROUGE-L, CIDEr-D; NW; coverage) on these
    images."""
    lex = default_lexicon()
    metrics = caption_metrics({i: references[i] for i in captions}, captions, meteor=False)
    nw, cov = [], []
    for i, text in captions.items():
        predicted = lex.nouns(tokenize(text))
        nw.append(np.mean([needleman_wunsch(predicted, lex.nouns(tokenize(r))) for r in references[i]]))
        classes = sorted({str(o["noun"]) for o in scenes[i]["objects"]})
        cov.append(coverage(predicted, classes))
    return {
        "bleu1": metrics.bleu1,
        "bleu4": metrics.bleu4,
        "rouge_l": metrics.rouge_l,
        "cider_d": metrics.cider_d,
        "nw": float(np.mean(nw)),
        "coverage": _mean(cov),
    }


async def observer_overhead(
    engine: CaptionEngine, images: np.ndarray, captioner: str, rounds: int = 3
) -> dict[str, float]:
    """One-image caption latency without and with the attention observer, each image captioned both
    ways back to back (order alternating by round): medians, and the median of the paired ratios."""
    params = engine.resolve(model=captioner)
    plain: list[float] = []
    observed: list[float] = []
    for r in range(rounds):
        for image in images:
            pair = [(plain, None), (observed, AttentionRecorder())]
            for bucket, observer in pair if r % 2 == 0 else pair[::-1]:
                t0 = time.perf_counter()
                await engine.caption(image[None], params, priority=Priority.BACKGROUND, observer=observer)
                bucket.append((time.perf_counter() - t0) * 1e3)
    ratios = [b / a for a, b in zip(plain, observed, strict=True)]
    return {
        "plain_ms": statistics.median(plain),
        "observed_ms": statistics.median(observed),
        "ratio": statistics.median(ratios),
        "pairs": len(ratios),
    }


async def explain_all(
    engine: CaptionEngine,
    service: ExplainService,
    captioner: str,
    images: np.ndarray,
    ids: list[int],
    scenes: dict[int, dict[str, Any]],
    methods: Sequence[str],
    n_steps: int,
) -> tuple[dict[int, str], dict[str, list[dict[str, Any]]]]:
    """Caption every image once (attention, on the live search), then explain that caption with every
    other method (teacher-forced through the torch programs)."""
    params = engine.resolve(model=captioner)
    captions: dict[int, str] = {}
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for image, i in tqdm(list(zip(images, ids, strict=True)), desc=f"explain {captioner}", unit="img"):
        spec = ExplainInput(image[None], params, "attention", scene=scenes[i], overlays=False)
        first = await service.explain(engine, spec)
        captions[i] = first["caption"]
        results["attention"].append(first)
        for method in methods:
            if method == "attention":
                continue
            spec = ExplainInput(
                image[None],
                params,
                method,
                caption=first["caption"],
                n_steps=n_steps,
                scene=scenes[i],
                overlays=False,
            )
            results[method].append(await service.explain(engine, spec))
    return captions, results


async def _run(
    zoo: Path,
    data: Path,
    out: Path,
    images: int,
    captioners: list[str] | None,
    methods: Sequence[str],
    n_steps: int,
) -> dict[str, Any]:
    manifest = load_manifest(zoo)
    vocab = Vocabulary.load(zoo / manifest.vocabulary.file)
    ds = load_folder(data)
    if not ds.scenes:
        raise ValueError(f"{data} has no scene graphs: the grounding study needs SceneWorld data")
    ids = [i for i in ds.image_ids if i in ds.scenes][:images]
    h, w = manifest.image.height, manifest.image.width
    pixels = load_images(data, [ds.file_names[i] for i in ids], h, w)
    names = captioners or default_captioners(manifest)
    engine = await open_engine(zoo)
    service = ExplainService(
        zoo, manifest, vocab, max_concurrent=1, max_ig_steps=max(n_steps, 20), torch_threads=2
    )
    command = f"compcap-lab explain-report --repo {zoo} --data {data} --images {images} --n-steps {n_steps}"
    if captioners:
        command += f" --model {' '.join(captioners)}"
    if tuple(methods) != METHODS:
        command += f" --methods {' '.join(methods)}"
    report: dict[str, Any] = {
        "images": len(ids),
        "data": str(data),
        "n_steps": n_steps,
        "command": command,
        "captioners": {},
    }
    examples: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            captions, results = await explain_all(
                engine, service, name, pixels, ids, ds.scenes, methods, n_steps
            )
            entry: dict[str, Any] = {
                "architecture": manifest.captioner(name).architecture,
                "quality": quality(captions, {i: ds.captions[i] for i in captions}, ds.scenes),
                "methods": {m: summarise(results[m]) for m in methods},
            }
            if "integrated_gradients" in methods and n_steps != 20:
                few = ids[: min(20, len(ids))]
                params = engine.resolve(model=name)
                at20 = [
                    await service.explain(
                        engine,
                        ExplainInput(
                            pixels[k][None],
                            params,
                            "integrated_gradients",
                            caption=captions[i],
                            n_steps=20,
                            scene=ds.scenes[i],
                            overlays=False,
                        ),
                    )
                    for k, i in enumerate(few)
                ]
                entry["ig_relative_delta_20"] = float(
                    np.mean([r for e in at20 for r in _relative(e["integrated_gradients"])])
                )
                entry["ig_relative_delta_same_images"] = float(
                    np.mean(
                        [
                            r
                            for e in results["integrated_gradients"][: len(few)]
                            for r in _relative(e["integrated_gradients"])
                        ]
                    )
                )
            entry["observer"] = await observer_overhead(engine, pixels[: min(50, len(ids))], name)
            report["captioners"][name] = entry
            examples[name] = {m: results[m][0] for m in methods}
            examples[name]["image"] = pixels[0]
    finally:
        await engine.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "explanations.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    from compcap_lab.studies.explanation_report import render_figure, render_markdown

    render_figure(examples, out / "explain_examples.png")
    (out / "explanations.md").write_text(render_markdown(report), encoding="utf-8")
    return report


def run_explain_report(
    zoo: Path,
    data: Path,
    out: Path,
    images: int = 500,
    captioners: list[str] | None = None,
    methods: Sequence[str] = METHODS,
    n_steps: int = 50,
) -> dict[str, Any]:
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"methods must be among {METHODS}, got {sorted(unknown)}")
    at_least(1, images=images)
    return asyncio.run(_run(zoo, data, out, images, captioners, methods, n_steps))
