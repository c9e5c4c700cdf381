"""The variants (INT8, FP16) as Triton models (config, manifest entry), timed against their FP32 models."""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from export.packaging.triton_repo import parse_config
from export.quantize.common import (
    PRECISION,
    caption_runs,
    console,
    engine_settings,
    open_backend,
    runs,
)
from export.quantize.methods import check_contract, keep_declarations
from export.quantize.precisions import INT8, PrecisionSpec, VariantJob
from service.engine.engine import CaptionEngine
from service.manifest import Manifest, ModelEntry, PrecisionGate, PrecisionVariant
from service.text.vocabulary import Vocabulary


def write_variant_config(repo: Path, source: str, variant: str, model_file: Path) -> None:
    """``<variant>/config.pbtxt``: the FP32 model's config with the variant's name (and, where the config
    carries one, the variant file's digest)."""
    from google.protobuf import text_format

    from service.backends.triton.addresses import DIGEST_PARAMETER, file_sha256

    config = parse_config((repo / source / "config.pbtxt").read_text(encoding="utf-8"))
    config.name = variant
    if DIGEST_PARAMETER in config.parameters:
        config.parameters[DIGEST_PARAMETER].string_value = file_sha256(model_file)
    text = text_format.MessageToString(config)
    if parse_config(text).name != variant:
        raise ValueError(f"config of {variant} does not parse back")
    (repo / variant / "config.pbtxt").write_text(text, encoding="utf-8")


def variant_entry(entry: ModelEntry, name: str) -> ModelEntry:
    """The manifest entry of ``entry``'s variant ``name``: the same tensors and batching, no torch
    program (explanations run the FP32 programs)."""
    return entry.model_copy(update={"name": name, "program": None})


def time_pair(
    fp32: Path,
    variant: Path,
    feeds: dict[str, np.ndarray],
    rounds: int = 5,
    seconds: float = 0.2,
    variant_level: str = "ORT_ENABLE_ALL",
) -> tuple[float, float]:
    """Median ms per call of each file on ``feeds``, the two timed in turn (a shared machine's load
    falls on both), in sessions set up as the embedded backend's on the CPU provider (the variant's at
    ``variant_level``: an FP16 LSTM step crashes onnxruntime 1.31's CPU provider at ORT_ENABLE_ALL).
    ``ValueError`` where the variant's outputs differ from the FP32 model's in name, dtype or shape."""
    import onnxruntime as ort

    def session(path: Path, level: str) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    sessions = [session(fp32, "ORT_ENABLE_ALL"), session(variant, variant_level)]
    times: list[list[float]] = [[], []]
    first = [dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True)) for s in sessions]
    shapes = [{k: (v.dtype.str, v.shape) for k, v in out.items()} for out in first]
    if shapes[0] != shapes[1]:
        raise ValueError(f"its outputs {shapes[1]} differ from the FP32 model's {shapes[0]}")
    for _ in range(rounds):
        for k, s in enumerate(sessions):
            n, start = 0, time.perf_counter()
            while n < 2 or time.perf_counter() - start < seconds:
                s.run(None, feeds)
                n += 1
            times[k].append((time.perf_counter() - start) / n * 1e3)
    return float(np.median(times[0])), float(np.median(times[1]))


def _rows(feeds: Mapping[str, np.ndarray]) -> int:
    return max((int(v.shape[0]) for v in feeds.values() if v.ndim), default=0)


def _largest(calls: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return max(calls, key=_rows)


TIMING_DEVICE = "cpu"  # time_pair runs onnxruntime's CPU provider


def make_variants(
    repo: Path,
    manifest: Manifest,
    calls: Mapping[str, Sequence[dict[str, np.ndarray]]],
    models: Sequence[str],
    method: str,
    min_speedup: float,
    timing_rounds: int = 5,
    spec: PrecisionSpec = INT8,
) -> PrecisionVariant:
    """Write the ``spec`` variant of each of ``models`` (see the package docstring); the set, ungated.
    A variant that fails to build, does not keep its FP32 model's inputs and outputs, or (where
    ``spec`` drops slower variants on the timing device) is not ``min_speedup`` faster is dropped."""
    made = PrecisionVariant(models={}, machine=machine(spec.cpu_feature), device=TIMING_DEVICE)
    key = f"{spec.name}_ms"
    with tempfile.TemporaryDirectory(prefix="compcap-quantize-") as tmp:
        for name in models:
            entry = manifest.model(name)
            how = spec.describe(entry, entry.path(repo), method)
            variant = name + spec.suffix
            out = repo / variant / "1" / "model.onnx"
            shutil.rmtree(repo / variant, ignore_errors=True)
            recorded = calls.get(name, [])
            if not recorded:
                made.skipped[name] = "no call recorded (no evaluation run uses it)"
                continue
            try:
                spec.make(VariantJob(entry, entry.path(repo), out, method, recorded, Path(tmp)))
                keep_declarations(entry.path(repo), out)
                check_contract(entry.path(repo), out)
                fp32_ms, variant_ms = time_pair(
                    entry.path(repo), out, _largest(recorded), timing_rounds, variant_level=spec.cpu_level
                )
            except Exception as exc:  # any failure leaves the model in FP32
                shutil.rmtree(repo / variant, ignore_errors=True)
                made.skipped[name] = f"{how} failed: {type(exc).__name__}: {exc}"[:300]
                console.print(f"[yellow]{name}[/]: {made.skipped[name]}")
                continue
            speedup = fp32_ms / variant_ms if variant_ms > 0 else 0.0
            made.speed[name] = {
                "fp32_ms": round(fp32_ms, 4),
                key: round(variant_ms, 4),
                "speedup": round(speedup, 3),
                "batch": float(_rows(_largest(recorded))),
            }
            if speedup < min_speedup and spec.drops_slower(made.device):
                shutil.rmtree(repo / variant, ignore_errors=True)
                made.skipped[name] = f"{how} is not faster: x{speedup:.2f} < x{min_speedup:.2f}"
                console.print(f"[yellow]{name}[/]: {made.skipped[name]} (kept FP32)")
                continue
            write_variant_config(repo, name, variant, out)
            made.models[name] = variant
            made.methods[name] = how
            console.print(
                f"{name}: {how} -> {variant}: {fp32_ms:.3f} ms -> {variant_ms:.3f} ms "
                f"(x{speedup:.2f}, {made.device}) at batch {made.speed[name]['batch']:.0f}"
            )
    return made


def machine(feature: str = "avx512_vnni") -> str:
    """The CPU model name, its widest AVX and whether it has ``feature`` (AVX-512 VNNI: INT8 dot
    products; AVX-512 FP16: FP16 arithmetic)."""
    name = platform.processor() or platform.machine()
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name") and ":" in line:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = line.split(":", 1)[1]
            if flags and name:
                break
    except OSError:
        pass
    has = feature if feature in flags.split() else f"no {feature}"
    avx = "avx512" if "avx512f" in flags.split() else "avx2" if "avx2" in flags.split() else "no avx2"
    return f"{name}, {os.cpu_count()} cpus, {avx}, {has}"


def with_variants(
    manifest: Manifest, made: PrecisionVariant, gate: PrecisionGate | None, precision: str = PRECISION
) -> Manifest:
    """``manifest`` without its earlier ``precision`` variants, with ``made`` under
    ``precision_variants.<precision>`` and, where ``gate`` passed, its variant models listed in
    ``models``; the sets of other precisions stay as they are."""
    old = manifest.precision_variants.get(precision)
    earlier = set(old.models.values()) if old is not None else set()
    models = [m for m in manifest.models if m.name not in earlier]
    recorded = made.model_copy(update={"gate": gate})
    if recorded.passed:
        models += [variant_entry(manifest.model(source), name) for source, name in made.models.items()]
    variants = {**manifest.precision_variants, precision: recorded}
    return Manifest.model_validate(
        {
            **manifest.model_dump(),
            "models": [m.model_dump() for m in models],
            "precision_variants": {k: v.model_dump() for k, v in variants.items()},
        }
    )


# -- the gate ------------------------------------------------------------------------------------------


async def engine_captions(
    repo: Path,
    manifest: Manifest,
    precision: str,
    images: np.ndarray,
    todo: Sequence[tuple[str, str | None]] | None = None,
) -> dict[str, list[str]]:
    vocab = Vocabulary.load(repo / manifest.vocabulary.file)
    backend = await asyncio.to_thread(open_backend, repo, manifest, precision)
    engine = CaptionEngine(backend, manifest, vocab, engine_settings(repo, manifest))
    try:
        return await caption_runs(engine, images, runs(manifest) if todo is None else todo)
    finally:
        await engine.close()
        await backend.close()


def affects(manifest: Manifest, model: str, run: tuple[str, str | None]) -> bool:
    """Whether ``model`` takes part in ``run`` (captioner, ranker)."""
    cap = manifest.captioner(run[0])
    ranker = manifest.ranker(run[1]) if run[1] else None
    if model in (cap.init, cap.step) or (ranker is not None and model in (ranker.image, ranker.text)):
        return True
    shared = cap.image is None or (ranker is not None and ranker.reads == "regions")
    return model == "visual_encoder" and shared
