"""The quality gate on the engine path: CIDEr-D, top-1 agreement and systematicity Recall@5, FP32 vs a
precision's variants (INT8, FP16); its figures are keyed by the precision's name (``cider_d_int8``)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from export.quantize.common import (
    BEAM_SIZE,
    PRECISION,
    RERANK_BEAM,
    Thresholds,
    console,
    engine_settings,
    label,
    open_backend,
    runs,
)
from export.quantize.variants import affects, engine_captions, with_variants
from service.engine.engine import CaptionEngine
from service.manifest import EXTERNAL_SPLIT, Manifest, PrecisionGate, PrecisionVariant, repo_probe_set_entry
from service.text.vocabulary import Vocabulary


def compare_runs(
    fp32: Mapping[str, Sequence[str]],
    variant: Mapping[str, Sequence[str]],
    references: Sequence[Sequence[str]],
    thresholds: Thresholds,
    precision: str = PRECISION,
    against_fp32: Collection[str] = (),
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Per run: CIDEr-D of both (DF from ``references``, as the build's quality; ``cider_d_fp32`` and
    ``cider_d_<precision>``), its relative change and the share of images with the same top-1 caption;
    and the thresholds missed. The runs ``against_fp32`` (an imported captioner's, which never saw the
    world's captions) are scored against their FP32 captions instead, one reference per image: the FP32
    figure is then the captions' own score, what identical captions reach (``cider_d_against_fp32``: 1
    in their row)."""
    from service.evaluation.metrics import caption_metrics

    world = {i: list(r) for i, r in enumerate(references)}
    rows: dict[str, dict[str, float]] = {}
    failures: list[str] = []
    for run, texts in variant.items():
        base = fp32[run]
        own = run in against_fp32
        refs = {i: [caption] for i, caption in enumerate(base)} if own else world
        cider = [
            float(caption_metrics(refs, dict(enumerate(t)), meteor=False).cider_d) for t in (base, texts)
        ]
        change = (cider[1] - cider[0]) / cider[0] if cider[0] else 0.0
        agreement = float(np.mean([a == b for a, b in zip(base, texts, strict=True)]))
        rows[run] = {
            "cider_d_fp32": round(cider[0], 4),
            f"cider_d_{precision}": round(cider[1], 4),
            "cider_d_rel_change": round(change, 4),
            "top1_agreement": round(agreement, 4),
            "images": float(len(texts)),
            **({"cider_d_against_fp32": 1.0} if own else {}),
        }
        if abs(change) > thresholds.cider_d_rel_change:
            failures.append(
                f"{run}: CIDEr-D {cider[0]:.4f} -> {cider[1]:.4f} ({change:+.2%}, limit "
                f"{thresholds.cider_d_rel_change:.0%})"
            )
        if agreement < thresholds.top1_agreement:
            failures.append(
                f"{run}: top-1 caption identical on {agreement:.1%} of images "
                f"(< {thresholds.top1_agreement:.0%})"
            )
    return rows, failures


# the order variants are admitted in: the step first (the throughput limit), then the encoders
ADMIT_ORDER = (
    "captioner_step",
    "visual_encoder",
    "captioner_encoder",
    "ranker_pixels",
    "captioner_init",
    "ranker_text",
    "ranker_image",
)


def admit(
    repo: Path,
    fp32: Manifest,
    made: PrecisionVariant,
    thresholds: Thresholds,
    images: np.ndarray,
    references: Sequence[Sequence[str]],
    precision: str = PRECISION,
) -> tuple[dict[str, str], PrecisionGate]:
    """Admit the variants one at a time (``ADMIT_ORDER``, then the larger time saved first): a variant
    joins the set when the set with it still passes the caption gate on every run it takes part in
    (CIDEr-D, top-1 agreement); one that does not is rejected (``made.skipped`` says why) and its model
    serves FP32. Returns the admitted set and its caption figures on every run."""
    all_runs = runs(fp32)
    imported = {label(r) for r in all_runs if fp32.captioner(r[0]).training.split == EXTERNAL_SPLIT}
    reference = asyncio.run(engine_captions(repo, fp32, "fp32", images))
    current = dict(reference)
    admitted: dict[str, str] = {}

    def order(name: str) -> tuple[int, float]:
        role = fp32.model(name).role
        speed = made.speed.get(name, {})
        return ADMIT_ORDER.index(role), -(speed.get("fp32_ms", 0.0) - speed.get(f"{precision}_ms", 0.0))

    for name in sorted(made.models, key=order):
        trial = {**admitted, name: made.models[name]}
        todo = [r for r in all_runs if affects(fp32, name, r)]
        trial_set = made.model_copy(update={"models": trial})
        provisional = with_variants(fp32, trial_set, PROVISIONAL, precision)
        captions = asyncio.run(engine_captions(repo, provisional, precision, images, todo))
        rows, failures = compare_runs(reference, captions, references, thresholds, precision, imported)
        if failures:
            made.skipped[name] = "rejected by the gate: " + "; ".join(failures)
            console.print(f"[yellow]{name}[/]: {made.skipped[name]}")
            continue
        admitted, current = trial, {**current, **captions}
        console.print(
            f"{name}: admitted ("
            + ", ".join(
                f"{run} top-1 {row['top1_agreement']:.1%}, CIDEr-D {row['cider_d_rel_change']:+.2%}"
                for run, row in rows.items()
            )
            + ")"
        )
    rows, failures = compare_runs(reference, current, references, thresholds, precision, imported)
    verdict = PrecisionGate(passed=not failures, thresholds=asdict(thresholds), runs=rows, failures=failures)
    return admitted, verdict


PROVISIONAL = PrecisionGate(passed=True, notes=["provisional: under the gate"])


def systematicity_runs(manifest: Manifest) -> list[tuple[str, str | None]]:
    """Each captioner at beam 5, and re-ranked by its own ranker (BUTR+RR) where it has one."""
    out: list[tuple[str, str | None]] = []
    for cap in manifest.captioners:
        out.append((cap.name, None))
        if cap.ranker is not None:
            out.append((cap.name, cap.ranker))
    return out


async def _systematicity(
    repo: Path, manifest: Manifest, precision: str, probe_set: str, images: int | None
) -> dict[str, dict[str, float | None]]:
    """Per systematicity run: the probe's mean Recall@5 of the held-out and the seen pairs (or of every
    pair where the held-out pairs are not known)."""
    from service.probes.kinds.record import KindRun, ProbeSpec, Progress
    from service.probes.kinds.systematicity_kind import run as run_probe
    from service.probes.scoring.parser import PairParser
    from service.probesets import load_probe_set

    entry = repo_probe_set_entry(repo, manifest, probe_set)
    loaded = load_probe_set(repo / entry.path)
    vocab = Vocabulary.load(repo / manifest.vocabulary.file)
    backend = await asyncio.to_thread(open_backend, repo, manifest, precision)
    engine = CaptionEngine(backend, manifest, vocab, engine_settings(repo, manifest))
    parser = PairParser()
    out: dict[str, dict[str, float | None]] = {}
    try:
        for cap, ranker in systematicity_runs(manifest):
            params = engine.resolve(
                model=cap,
                beam_size=RERANK_BEAM if ranker else BEAM_SIZE,
                n_best=BEAM_SIZE,
                rerank=ranker if ranker else False,
            )
            spec = ProbeSpec("systematicity", probe_set, params, None, images)
            result = await run_probe(KindRun(engine, spec, loaded, parser, Progress()))
            held = (result.get("held_out") or result.get("all") or {}).get("recall", {})
            seen = (result.get("seen") or {}).get("recall", {})
            out[label((cap, ranker))] = {"held_out": held.get("5"), "seen": seen.get("5")}
    finally:
        parser.close()
        await engine.close()
        await backend.close()
    return out


def systematicity_gate(
    repo: Path,
    provisional: Manifest,
    verdict: PrecisionGate,
    thresholds: Thresholds,
    probe_set: str,
    probe_images: int | None,
    precision: str = PRECISION,
) -> None:
    """Add the systematicity figures of the admitted set to ``verdict`` (failing it where they move by
    more than ``thresholds.recall5_points``)."""
    recall = {
        p: asyncio.run(_systematicity(repo, provisional, p, probe_set, probe_images))
        for p in ("fp32", precision)
    }
    for run, fp32_r in recall["fp32"].items():
        variant_r = recall[precision][run]
        row: dict[str, float] = {}
        for part in ("held_out", "seen"):
            a, b = fp32_r.get(part), variant_r.get(part)
            if a is None or b is None:
                continue
            delta = (b - a) * 100
            row |= {f"recall5_{part}_fp32": round(a, 4), f"recall5_{part}_{precision}": round(b, 4)}
            row[f"recall5_{part}_delta_points"] = round(delta, 3)
            if abs(delta) > thresholds.recall5_points:
                verdict.failures.append(
                    f"{run}: systematicity mean Recall@5 ({part.replace('_', '-')} pairs) {a * 100:.2f} -> "
                    f"{b * 100:.2f} ({delta:+.2f} points, limit {thresholds.recall5_points})"
                )
        verdict.systematicity[run] = row
    scope = "all its images" if probe_images is None else f"at most {probe_images} images per pair"
    verdict.notes.append(
        f"systematicity on probe set {probe_set!r} ({scope}); re-ranked runs decode {RERANK_BEAM} beams"
    )
    verdict.passed = not verdict.failures
