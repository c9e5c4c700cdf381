"""``quantize_repo``: calibrate, make the variants, gate them, record them in the manifest; its report."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from export.quantize.common import (
    PRECISION,
    QuantizeResult,
    Thresholds,
    console,
    record_calls,
    world_images,
    world_seed,
)
from export.quantize.gate import PROVISIONAL, admit, systematicity_gate
from export.quantize.precisions import spec_for
from export.quantize.variants import make_variants, with_variants
from service.manifest import PrecisionGate, load_manifest, repo_probe_set_entries

# -- the command -----------------------------------------------------------------------------------------


def gate_device(setting: str) -> str:
    """The device the gate's decodes run on under ``COMPCAP_DEVICE=setting``: cuda where it is asked
    for or (auto) where CUDA can be used, else cpu."""
    if setting == "cpu":
        return "cpu"
    from service.backends.device import cuda_problem

    return "cuda" if cuda_problem() is None else "cpu"


def quantize_repo(
    repo: Path,
    models: Sequence[str] | None = None,
    method: str = "auto",
    thresholds: Thresholds | None = None,
    calibration_images: int = 64,
    eval_images: int | None = None,
    probe_images: int | None = None,
    systematicity: bool = True,
    min_speedup: float = 1.0,
    timing_rounds: int = 5,
    seed: int | None = None,
    precision: str = PRECISION,
) -> QuantizeResult:
    """Write, time and gate the ``precision`` variants (int8, fp16) of ``repo`` (of ``models``, default
    every model) and record them in its manifest (see the package docstring); earlier variants of that
    precision are replaced, those of another stay. ``thresholds``: default the precision's own
    (``PrecisionSpec.thresholds``). ``eval_images``:
    images of the evaluation world (default: the preset's ``eval_images``, as the build's quality);
    ``probe_images``: at most this many systematicity probe images per pair (default all);
    ``systematicity=False`` gates without the probe; ``min_speedup``: drop a variant slower than this
    (0 keeps every variant whatever its speed)."""
    from export.presets import get_preset
    from export.probesets.repo import write_manifest
    from sceneworld.dataset import TEST_SEED_OFFSET

    spec = spec_for(precision)
    if spec.only_on is not None:
        from export.quantize.common import engine_settings

        device = gate_device(engine_settings(Path(repo)).device)
        if device != spec.only_on:
            where, here = spec.only_on.upper(), device.upper()
            raise ValueError(
                f"--precision {precision}: {precision.upper()} exists only on {where}, and the gate would "
                f"decode on the {here} here (COMPCAP_DEVICE): run it on the GPU host"
            )
    if method not in spec.methods:
        raise ValueError(f"method must be one of {spec.methods} at precision {precision}, got {method!r}")
    repo = Path(repo)
    thresholds = thresholds or spec.thresholds
    base = load_manifest(repo)
    variants = {v for p in base.precision_variants.values() for v in p.models.values()}
    fp32 = base.model_copy(
        update={"models": [m for m in base.models if m.name not in variants], "precision_variants": {}}
    )
    own = base.precision_variants.get(precision)
    earlier = set(own.models.values()) if own is not None else set()
    names = [m.name for m in fp32.models]
    for name in models or ():
        if name not in names:
            raise ValueError(f"{name!r} is not an FP32 model of {repo} (models: {', '.join(names)})")
    for old in earlier:
        shutil.rmtree(repo / old, ignore_errors=True)
    seconds: dict[str, float] = {}
    seed = world_seed(repo, fp32) if seed is None else seed
    size = fp32.image.height
    t0 = time.perf_counter()
    console.print(f"calibration: {calibration_images} images of the training world (seed {seed})")
    calibration, _ = world_images(calibration_images, seed, size)
    calls = asyncio.run(record_calls(repo, fp32, calibration))
    seconds["calibration"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    made = make_variants(repo, fp32, calls, list(models or names), method, min_speedup, timing_rounds, spec)
    del calls  # the gate loads models of its own: the recorded inputs are done with
    seconds["quantize"] = time.perf_counter() - t0
    label = precision.upper()
    timing = [spec.cpu_timing_note] if spec.cpu_timing_note and made.device == "cpu" else []
    notes = [*timing, *spec.notes]
    verdict = PrecisionGate(
        passed=False, thresholds=asdict(thresholds), failures=[f"no {label} variant"], notes=notes
    )
    if made.models:
        t0 = time.perf_counter()
        try:
            n_eval = eval_images or get_preset(fp32.preset).eval_images
        except (KeyError, ValueError):
            n_eval = eval_images or 500
        console.print(f"gate: {n_eval} images of the evaluation world (seed {seed + TEST_SEED_OFFSET})")
        images, references = world_images(n_eval, seed + TEST_SEED_OFFSET, size)
        admitted, verdict = admit(repo, fp32, made, thresholds, images, references, precision)
        verdict.notes[:0] = notes
        for name in set(made.models) - set(admitted):
            shutil.rmtree(repo / made.models[name], ignore_errors=True)
        made.methods = {k: v for k, v in made.methods.items() if k in admitted}
        made.models = admitted
        if not admitted:
            verdict.passed = False
            verdict.failures.append(f"no {label} variant passed the gate")
        sets = [p.name for p in repo_probe_set_entries(repo, fp32) if p.kind == "systematicity"]
        if not systematicity:
            verdict.notes.append("systematicity not measured: skipped (--no-systematicity)")
        elif not sets:
            verdict.notes.append(
                "systematicity not measured: the repository has no systematicity probe set "
                "(`compcap probesets --repo REPO` writes it)"
            )
        elif admitted:
            probe_set = "systematicity" if "systematicity" in sets else sets[0]
            provisional = with_variants(fp32, made, PROVISIONAL, precision)
            systematicity_gate(repo, provisional, verdict, thresholds, probe_set, probe_images, precision)
        seconds["gate"] = time.perf_counter() - t0
    manifest = with_variants(base, made, verdict, precision)
    write_manifest(repo, manifest)
    return QuantizeResult(manifest.precision_variants[precision], manifest, seconds, precision)


def report_lines(result: QuantizeResult) -> list[str]:
    """What ``compcap quantize`` prints."""
    v, p = result.variant, result.precision
    lines = [f"precision: {p}", f"machine: {v.machine} (timed on: {v.device})"]
    for name, variant in v.models.items():
        s = v.speed.get(name, {})
        lines.append(
            f"  {name} -> {variant} ({v.methods[name]}): {s.get('fp32_ms', 0):.3f} -> "
            f"{s.get(f'{p}_ms', 0):.3f} ms at batch {s.get('batch', 0):.0f} (x{s.get('speedup', 0):.2f}, "
            f"{v.device})"
        )
    for name, why in v.skipped.items():
        lines.append(f"  {name}: FP32 ({why})")
    g = v.gate
    if g is not None:
        for run, row in g.runs.items():
            against = " against the FP32 captions" if row.get("cider_d_against_fp32") else ""
            lines.append(
                f"  {run}: CIDEr-D{against} {row['cider_d_fp32']:.4f} -> {row[f'cider_d_{p}']:.4f} "
                f"({row['cider_d_rel_change']:+.2%}), top-1 identical {row['top1_agreement']:.1%} "
                f"of {row['images']:.0f} images"
            )
        for run, row in g.systematicity.items():
            parts = [
                f"{part.replace('_', '-')} R@5 {row[f'recall5_{part}_fp32'] * 100:.2f} -> "
                f"{row[f'recall5_{part}_{p}'] * 100:.2f} ({row[f'recall5_{part}_delta_points']:+.2f} pts)"
                for part in ("held_out", "seen")
                if f"recall5_{part}_fp32" in row
            ]
            lines.append(f"  {run} systematicity: " + ", ".join(parts))
        lines += [f"  note: {n}" for n in g.notes]
        lines += [f"  FAILED: {f}" for f in g.failures]
        lines.append(
            f"gate: {f'passed: served with COMPCAP_PRECISION={p}' if g.passed else 'failed: not served'}"
        )
    lines.append("seconds: " + ", ".join(f"{k} {s:.1f}" for k, s in result.seconds.items()))
    return lines
