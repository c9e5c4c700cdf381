"""``compcap quantize``: INT8 variants of a repository's models, gated on quality through the served
engine, listed in the manifest beside the FP32 models and served with ``COMPCAP_PRECISION=int8``.

1. Calibration: training-world images (the first ``calibration_images`` of the world the repository
   was trained on) are captioned through ``CaptionEngine`` on the FP32 models in every evaluation run
   (each captioner plain and re-ranked, beam 5), and every model call's inputs are kept: what static
   quantization calibrates on and what each variant is timed on.
2. Variants (``recipe``): ``dynamic`` (``quantize_dynamic``: INT8 weights, activations quantized at run
   time from each call's range) or ``static`` (``quantize_static`` in the QDQ format: activation ranges
   calibrated in step 1, weights per channel; recurrent kernels, which QDQ cannot quantize, dynamically).
   ``auto``, measured on the default repository (docs/benchmarks.md, "INT8"): static for a graph with
   convolutions, its first Conv (the one reading the image) left FP32; for a recurrent step, its LSTM
   kernels only; dynamic MatMul/Gemm (and recurrent kernels) for the rest. A matrix-vector MatMul (a
   weight of fewer than ``MIN_COLUMNS`` columns, e.g. an attention score) always stays FP32: per-tensor
   INT8 loses most of its precision and gains no time. Each variant is a Triton model of its own,
   ``<name>_int8/config.pbtxt`` (the FP32 config, renamed) + ``<name>_int8/1/model.onnx``, timed
   against its FP32 model (in turn, median) on the largest recorded call; one not faster by
   ``min_speedup``, or that fails to build or run, is dropped: its model serves FP32.
3. The gate, on the engine path (FP32 and INT8 engines on the same images of the evaluation world: the
   build's test world, its first ``eval_images``): CIDEr-D (DF from the evaluated references, as the
   build's ``quality``) and top-1 caption agreement of every evaluation run (``runs_for``). Variants
   are admitted one at a time (``admit``: the steps first): one that takes a run it is part of past a
   threshold is rejected and its model serves FP32. Then the systematicity probe's mean Recall@5 of the
   held-out and the seen pairs (each captioner at beam 5, and re-ranked by its own ranker with 100
   beams, the probes' BUTR+RR) on the repository's systematicity probe set, when it has one (else
   noted), for the admitted set as a whole. A set that misses a threshold is recorded as failed
   (``precision_variants.int8.gate``) and its models are not listed in ``models``: no gateway serves
   them (``Manifest.served_models``).

INT8 activations quantized per call make a row's outputs depend a little on the other rows of its call,
so the INT8 captions (and the gate's figures) move slightly with how the engine batched the images.
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from export.repo import parse_config
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.engine.engine import CaptionEngine
from service.manifest import Manifest, ModelEntry, PrecisionGate, PrecisionVariant, load_manifest
from service.settings import EngineSettings
from service.text.vocabulary import Vocabulary

PRECISION = "int8"
SUFFIX = "_int8"
METHODS = ("auto", "dynamic", "static")
MIN_COLUMNS = 8  # a MatMul/Gemm weight with fewer output columns stays FP32 (matrix-vector)
CALIBRATION_CALLS = 48  # most recorded calls per model
BEAM_SIZE = 5
RERANK_BEAM = 100  # the probes' re-ranked runs (BUTR+RR), as the probe schedule's default
console = Console(stderr=True)


@dataclass(frozen=True)
class Thresholds:
    """The gate (issue 31): CIDEr-D within 2% relative, top-1 identical on >= 90% of images, the
    systematicity mean Recall@5 within 1 point."""

    cider_d_rel_change: float = 0.02
    top1_agreement: float = 0.90
    recall5_points: float = 1.0


@dataclass
class QuantizeResult:
    variant: PrecisionVariant
    manifest: Manifest
    seconds: dict[str, float] = field(default_factory=dict)


# -- calibration: every model call's inputs while the FP32 engine captions training-world images ------


class RecordingBackend:
    """Wraps a backend; keeps the inputs of up to ``limit`` calls per model (every ``stride``-th)."""

    def __init__(self, inner: OnnxRuntimeBackend, limit: int = CALIBRATION_CALLS) -> None:
        self.inner, self.limit = inner, limit
        self.calls: dict[str, list[dict[str, np.ndarray]]] = {}
        self.seen: dict[str, int] = {}

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kept = self.calls.setdefault(model, [])
        self.seen[model] = self.seen.get(model, 0) + 1
        if len(kept) < self.limit:
            kept.append({k: np.array(v, copy=True) for k, v in inputs.items()})
        return await self.inner.infer(model, inputs)

    async def close(self) -> None:
        await self.inner.close()


def world_seed(repo: Path, manifest: Manifest, default: int = 0) -> int:
    """The seed of the SceneWorld the repository was trained on (its ``build_report.json``, else its
    captioners' ``training.dataset``), else ``default``."""
    import json

    report = repo / "build_report.json"
    if report.is_file():
        seed = json.loads(report.read_text(encoding="utf-8")).get("seed")
        if isinstance(seed, int):
            return seed
    for cap in manifest.captioners:
        found = re.search(r"sceneworld\(seed=(\d+)", cap.training.dataset)
        if found:
            return int(found.group(1))
    return default


def world_images(n: int, seed: int, size: int) -> tuple[np.ndarray, list[list[str]]]:
    """The first ``n`` images of SceneWorld ``seed`` at ``size`` pixels, and their captions."""
    from export.world.dataset import generate

    images, captions, _ = generate(n, seed=seed, image_size=size)
    return images, captions


def engine_settings(repo: Path, **overrides: Any) -> EngineSettings:
    """The engine's settings (``COMPCAP_*``) with the precision left to the backend each run builds."""
    return EngineSettings(repo=repo, precision="fp32", max_beam_size=RERANK_BEAM, **overrides)


def open_backend(repo: Path, manifest: Manifest, precision: str) -> OnnxRuntimeBackend:
    s = engine_settings(repo)
    return OnnxRuntimeBackend(
        repo, manifest, s.intra_op_threads, None, s.executor_threads, s.ort_spinning, precision
    )


def runs(manifest: Manifest) -> list[tuple[str, str | None]]:
    """Each captioner plain, then re-ranked by its own ranker or vsepp (``compcap evaluate``'s runs)."""
    from export.studies.runs import runs_for

    return runs_for(manifest)


def label(run: tuple[str, str | None]) -> str:
    return f"{run[0]}+{run[1]}" if run[1] else run[0]


async def _caption_runs(
    engine: CaptionEngine, images: np.ndarray, todo: Sequence[tuple[str, str | None]]
) -> dict[str, list[str]]:
    """Top-1 caption per image of each run (beam 5; a re-ranked run re-ranks its 5 beams)."""
    out = {}
    for cap, ranker in todo:
        params = engine.resolve(model=cap, beam_size=BEAM_SIZE, rerank=ranker if ranker else False)
        captions = await engine.caption_many(images, params)
        out[label((cap, ranker))] = [per[0].text if per else "" for per in captions]
    return out


async def record_calls(
    repo: Path, manifest: Manifest, images: np.ndarray
) -> dict[str, list[dict[str, np.ndarray]]]:
    """Inputs of every FP32 model's calls while the engine captions ``images`` in every run."""
    vocab = Vocabulary.load(repo / manifest.vocabulary.file)
    recorder = RecordingBackend(await asyncio.to_thread(open_backend, repo, manifest, "fp32"))
    engine = CaptionEngine(recorder, manifest, vocab, engine_settings(repo))
    try:
        await _caption_runs(engine, images, runs(manifest))
    finally:
        await engine.close()
        await recorder.close()
    return recorder.calls


# -- variants ----------------------------------------------------------------------------------------


def _small_weight_nodes(model_path: Path) -> list[str]:
    """MatMul/Gemm nodes whose constant weight has fewer than ``MIN_COLUMNS`` output columns."""
    import onnx

    graph = onnx.load(str(model_path)).graph
    weights = {t.name: list(t.dims) for t in graph.initializer}
    small = []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
            continue
        dims = weights.get(node.input[1])
        if dims is None:
            continue
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        columns = dims[0] if node.op_type == "Gemm" and trans_b else dims[-1]
        if columns < MIN_COLUMNS:
            small.append(node.name)
    return small


def _ops(model_path: Path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(model_path)).graph.node}


class _Feeds:
    """A ``CalibrationDataReader`` over recorded calls."""

    def __init__(self, calls: Sequence[dict[str, np.ndarray]]) -> None:
        self._it = iter(calls)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


RECURRENT = ("LSTM", "GRU")


@dataclass(frozen=True)
class Recipe:
    """How one model is quantized: ``method`` and the op types it quantizes (the rest stay FP32)."""

    method: str  # dynamic | static
    ops: tuple[str, ...]

    def describe(self) -> str:
        recurrent = [op for op in self.ops if op in RECURRENT]
        if self.method == "static":
            text = "static QDQ (" + ", ".join(op for op in self.ops if op not in RECURRENT)
            text += "; the first Conv FP32)" if "Conv" in self.ops else ")"
            return text + (f" + dynamic {', '.join(recurrent)}" if recurrent else "")
        return f"dynamic ({', '.join(self.ops)})"


def recipe(role: str, graph_ops: set[str], method: str) -> Recipe:
    """``auto``: static QDQ for a graph with convolutions (dynamic ConvInteger is slower than FP32);
    for a recurrent step, its recurrent kernels only (quantizing its attention and output MatMuls too
    gained ~10% of speed and cost ~5 points of top-1 agreement on the default repository); dynamic
    MatMul/Gemm (and recurrent kernels) for the rest."""
    recurrent = tuple(op for op in RECURRENT if op in graph_ops)
    if method == "auto":
        if "Conv" in graph_ops:
            method = "static"
        elif role == "captioner_step" and recurrent:
            return Recipe("dynamic", recurrent)
        else:
            method = "dynamic"
    if method == "static":
        return Recipe("static", ("Conv", "MatMul", "Gemm", *recurrent))
    if method == "dynamic":
        return Recipe("dynamic", ("MatMul", "Gemm", *recurrent))
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _first_conv(model_path: Path) -> list[str]:
    """The first Conv node: it reads the image, whose INT8 activations cost most of the precision
    (regions' relative error 21% with it, 1.7% without, on the default repository's encoder)."""
    import onnx

    return [n.name for n in onnx.load(str(model_path)).graph.node if n.op_type == "Conv"][:1]


def preprocess(source: Path, work: Path) -> Path:
    """``source`` after onnxruntime's pre-processing (shape inference, clean-up), or as it is."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = work / f"{source.parent.parent.name}.pre.onnx"
    try:
        quant_pre_process(str(source), str(pre))
    except Exception:  # a graph symbolic shape inference cannot handle is quantized as it is
        shutil.copyfile(source, pre)
    return pre


def quantize_model(
    source: Path, out: Path, recipe: Recipe, calls: Sequence[dict[str, np.ndarray]], work: Path
) -> None:
    """Write ``source`` quantized by ``recipe`` to ``out`` (``calls``: static's calibration data)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    pre = preprocess(source, work)
    keep = _small_weight_nodes(pre)
    recurrent = [op for op in recipe.ops if op in RECURRENT]
    out.parent.mkdir(parents=True, exist_ok=True)
    if recipe.method == "dynamic":
        quantize_dynamic(
            str(pre),
            str(out),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(recipe.ops),
            nodes_to_exclude=keep,
        )
        return
    if not calls:
        raise ValueError(f"static quantization of {source} needs recorded calls to calibrate on")
    reader: CalibrationDataReader = _Feeds(calls)
    qdq = work / f"{out.parent.parent.name}.qdq.onnx"
    quantize_static(
        str(pre),
        str(qdq),
        reader,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=[op for op in recipe.ops if op not in RECURRENT],
        nodes_to_exclude=keep + _first_conv(pre),
    )
    if recurrent:  # QDQ has no recurrent kernels: their weights are quantized dynamically
        quantize_dynamic(str(qdq), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=recurrent)
    else:
        shutil.move(str(qdq), str(out))


def write_variant_config(repo: Path, source: str, variant: str, model_file: Path) -> None:
    """``<variant>/config.pbtxt``: the FP32 model's config with the variant's name (and, where the config
    carries one, the variant file's digest)."""
    from google.protobuf import text_format

    from service.backends.triton_addresses import DIGEST_PARAMETER, file_sha256

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
    fp32: Path, int8: Path, feeds: dict[str, np.ndarray], rounds: int = 5, seconds: float = 0.2
) -> tuple[float, float]:
    """Median ms per call of each file on ``feeds``, the two timed in turn (a shared machine's load
    falls on both), in sessions set up as the embedded backend's."""
    import onnxruntime as ort

    def session(path: Path) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    sessions = [session(fp32), session(int8)]
    times: list[list[float]] = [[], []]
    for s in sessions:
        s.run(None, feeds)
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


def make_variants(
    repo: Path,
    manifest: Manifest,
    calls: Mapping[str, Sequence[dict[str, np.ndarray]]],
    models: Sequence[str],
    method: str,
    min_speedup: float,
    timing_rounds: int = 5,
) -> PrecisionVariant:
    """Write the variant of each of ``models`` (see the module docstring); the set, ungated."""
    made = PrecisionVariant(models={}, machine=machine())
    with tempfile.TemporaryDirectory(prefix="compcap-quantize-") as tmp:
        for name in models:
            entry = manifest.model(name)
            chosen = recipe(entry.role, _ops(entry.path(repo)), method)
            variant = name + SUFFIX
            out = repo / variant / "1" / "model.onnx"
            shutil.rmtree(repo / variant, ignore_errors=True)
            recorded = calls.get(name, [])
            if not recorded:
                made.skipped[name] = "no call recorded (no evaluation run uses it)"
                continue
            try:
                quantize_model(entry.path(repo), out, chosen, recorded, Path(tmp))
                fp32_ms, int8_ms = time_pair(entry.path(repo), out, _largest(recorded), timing_rounds)
            except Exception as exc:  # any failure leaves the model in FP32
                shutil.rmtree(repo / variant, ignore_errors=True)
                made.skipped[name] = f"{chosen.describe()} failed: {type(exc).__name__}: {exc}"[:300]
                console.print(f"[yellow]{name}[/]: {made.skipped[name]}")
                continue
            speedup = fp32_ms / int8_ms if int8_ms > 0 else 0.0
            made.speed[name] = {
                "fp32_ms": round(fp32_ms, 4),
                "int8_ms": round(int8_ms, 4),
                "speedup": round(speedup, 3),
                "batch": float(_rows(_largest(recorded))),
            }
            if speedup < min_speedup:
                shutil.rmtree(repo / variant, ignore_errors=True)
                made.skipped[name] = f"{chosen.describe()} is not faster: x{speedup:.2f} < x{min_speedup:.2f}"
                console.print(f"[yellow]{name}[/]: {made.skipped[name]} (kept FP32)")
                continue
            write_variant_config(repo, name, variant, out)
            made.models[name] = variant
            made.methods[name] = chosen.describe()
            console.print(
                f"{name}: {chosen.describe()} -> {variant}: {fp32_ms:.3f} ms -> {int8_ms:.3f} ms "
                f"(x{speedup:.2f}) at batch {made.speed[name]['batch']:.0f}"
            )
    return made


def machine() -> str:
    """The CPU model name and whether it has AVX-512 VNNI (INT8 dot products)."""
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
    vnni = "avx512_vnni" if "avx512_vnni" in flags.split() else "no avx512_vnni"
    avx = "avx512" if "avx512f" in flags.split() else "avx2" if "avx2" in flags.split() else "no avx2"
    return f"{name}, {os.cpu_count()} cpus, {avx}, {vnni}"


def with_variants(manifest: Manifest, made: PrecisionVariant, gate: PrecisionGate | None) -> Manifest:
    """``manifest`` without earlier variants, with ``made`` under ``precision_variants.int8`` and, where
    ``gate`` passed, its variant models listed in ``models``."""
    earlier = {v for p in manifest.precision_variants.values() for v in p.models.values()}
    models = [m for m in manifest.models if m.name not in earlier]
    recorded = made.model_copy(update={"gate": gate})
    if recorded.passed:
        models += [variant_entry(manifest.model(source), name) for source, name in made.models.items()]
    variants = {**manifest.precision_variants, PRECISION: recorded}
    return Manifest.model_validate(
        {
            **manifest.model_dump(),
            "models": [m.model_dump() for m in models],
            "precision_variants": {k: v.model_dump() for k, v in variants.items()},
        }
    )


# -- the gate ------------------------------------------------------------------------------------------


async def _engine_captions(
    repo: Path,
    manifest: Manifest,
    precision: str,
    images: np.ndarray,
    todo: Sequence[tuple[str, str | None]] | None = None,
) -> dict[str, list[str]]:
    vocab = Vocabulary.load(repo / manifest.vocabulary.file)
    backend = await asyncio.to_thread(open_backend, repo, manifest, precision)
    engine = CaptionEngine(backend, manifest, vocab, engine_settings(repo))
    try:
        return await _caption_runs(engine, images, runs(manifest) if todo is None else todo)
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


def compare_runs(
    fp32: Mapping[str, Sequence[str]],
    int8: Mapping[str, Sequence[str]],
    references: Sequence[Sequence[str]],
    thresholds: Thresholds,
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Per run: CIDEr-D of both (DF from ``references``, as the build's quality), its relative change
    and the share of images with the same top-1 caption; and the thresholds missed."""
    from service.evaluation.metrics import caption_metrics

    refs = {i: list(r) for i, r in enumerate(references)}
    rows: dict[str, dict[str, float]] = {}
    failures: list[str] = []
    for run, texts in int8.items():
        base = fp32[run]
        cider = [
            float(caption_metrics(refs, dict(enumerate(t)), meteor=False).cider_d) for t in (base, texts)
        ]
        change = (cider[1] - cider[0]) / cider[0] if cider[0] else 0.0
        agreement = float(np.mean([a == b for a, b in zip(base, texts, strict=True)]))
        rows[run] = {
            "cider_d_fp32": round(cider[0], 4),
            "cider_d_int8": round(cider[1], 4),
            "cider_d_rel_change": round(change, 4),
            "top1_agreement": round(agreement, 4),
            "images": float(len(texts)),
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
) -> tuple[dict[str, str], PrecisionGate]:
    """Admit the variants one at a time (``ADMIT_ORDER``, then the larger time saved first): a variant
    joins the set when the set with it still passes the caption gate on every run it takes part in
    (CIDEr-D, top-1 agreement); one that does not is rejected (``made.skipped`` says why) and its model
    serves FP32. Returns the admitted set and its caption figures on every run."""
    all_runs = runs(fp32)
    reference = asyncio.run(_engine_captions(repo, fp32, "fp32", images))
    current = dict(reference)
    admitted: dict[str, str] = {}

    def order(name: str) -> tuple[int, float]:
        role = fp32.model(name).role
        speed = made.speed.get(name, {})
        return ADMIT_ORDER.index(role), -(speed.get("fp32_ms", 0.0) - speed.get("int8_ms", 0.0))

    for name in sorted(made.models, key=order):
        trial = {**admitted, name: made.models[name]}
        todo = [r for r in all_runs if affects(fp32, name, r)]
        provisional = with_variants(fp32, made.model_copy(update={"models": trial}), PROVISIONAL)
        captions = asyncio.run(_engine_captions(repo, provisional, PRECISION, images, todo))
        rows, failures = compare_runs(reference, captions, references, thresholds)
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
    rows, failures = compare_runs(reference, current, references, thresholds)
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
    from service.probes.kind import ProbeSpec, Progress
    from service.probes.kinds.systematicity import run as run_probe
    from service.probes.parser import PairParser
    from service.probes.sets import load_probe_set

    entry = manifest.probe_set(probe_set)
    loaded = load_probe_set(repo / entry.path)
    vocab = Vocabulary.load(repo / manifest.vocabulary.file)
    backend = await asyncio.to_thread(open_backend, repo, manifest, precision)
    engine = CaptionEngine(backend, manifest, vocab, engine_settings(repo))
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
            result = await run_probe(engine, spec, loaded, parser, Progress())
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
) -> None:
    """Add the systematicity figures of the admitted set to ``verdict`` (failing it where they move by
    more than ``thresholds.recall5_points``)."""
    recall = {
        p: asyncio.run(_systematicity(repo, provisional, p, probe_set, probe_images))
        for p in ("fp32", PRECISION)
    }
    for run, fp32_r in recall["fp32"].items():
        int8_r = recall[PRECISION][run]
        row: dict[str, float] = {}
        for part in ("held_out", "seen"):
            a, b = fp32_r.get(part), int8_r.get(part)
            if a is None or b is None:
                continue
            delta = (b - a) * 100
            row |= {f"recall5_{part}_fp32": round(a, 4), f"recall5_{part}_int8": round(b, 4)}
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


# -- the command -----------------------------------------------------------------------------------------


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
) -> QuantizeResult:
    """Write, time and gate the INT8 variants of ``repo`` (of ``models``, default every model) and record
    them in its manifest (see the module docstring); earlier variants are replaced. ``eval_images``:
    images of the evaluation world (default: the preset's ``eval_images``, as the build's quality);
    ``probe_images``: at most this many systematicity probe images per pair (default all);
    ``systematicity=False`` gates without the probe; ``min_speedup``: drop a variant slower than this
    (0 keeps every variant whatever its speed)."""
    from export.build import TEST_SEED_OFFSET
    from export.presets import get_preset
    from export.probesets.repo import write_manifest

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    repo = Path(repo)
    thresholds = thresholds or Thresholds()
    base = load_manifest(repo)
    earlier = {v for p in base.precision_variants.values() for v in p.models.values()}
    fp32 = base.model_copy(
        update={"models": [m for m in base.models if m.name not in earlier], "precision_variants": {}}
    )
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
    made = make_variants(repo, fp32, calls, list(models or names), method, min_speedup, timing_rounds)
    seconds["quantize"] = time.perf_counter() - t0
    verdict = PrecisionGate(passed=False, thresholds=asdict(thresholds), failures=["no INT8 variant"])
    if made.models:
        t0 = time.perf_counter()
        try:
            n_eval = eval_images or get_preset(fp32.preset).eval_images
        except (KeyError, ValueError):
            n_eval = eval_images or 500
        console.print(f"gate: {n_eval} images of the evaluation world (seed {seed + TEST_SEED_OFFSET})")
        images, references = world_images(n_eval, seed + TEST_SEED_OFFSET, size)
        admitted, verdict = admit(repo, fp32, made, thresholds, images, references)
        for name in set(made.models) - set(admitted):
            shutil.rmtree(repo / made.models[name], ignore_errors=True)
        made.methods = {k: v for k, v in made.methods.items() if k in admitted}
        made.models = admitted
        if not admitted:
            verdict.passed = False
            verdict.failures.append("no INT8 variant passed the gate")
        sets = [p.name for p in fp32.probe_sets if p.kind == "systematicity"]
        if not systematicity:
            verdict.notes.append("systematicity not measured: skipped (--no-systematicity)")
        elif not sets:
            verdict.notes.append(
                "systematicity not measured: the repository has no systematicity probe set "
                "(`compcap probesets --repo REPO` writes it)"
            )
        elif admitted:
            probe_set = "systematicity" if "systematicity" in sets else sets[0]
            provisional = with_variants(fp32, made, PROVISIONAL)
            systematicity_gate(repo, provisional, verdict, thresholds, probe_set, probe_images)
        seconds["gate"] = time.perf_counter() - t0
    manifest = with_variants(fp32, made, verdict)
    write_manifest(repo, manifest)
    return QuantizeResult(manifest.precision_variants[PRECISION], manifest, seconds)


def report_lines(result: QuantizeResult) -> list[str]:
    """What ``compcap quantize`` prints."""
    v = result.variant
    lines = [f"machine: {v.machine}"]
    for name, variant in v.models.items():
        s = v.speed.get(name, {})
        lines.append(
            f"  {name} -> {variant} ({v.methods[name]}): {s.get('fp32_ms', 0):.3f} -> "
            f"{s.get('int8_ms', 0):.3f} ms at batch {s.get('batch', 0):.0f} (x{s.get('speedup', 0):.2f})"
        )
    for name, why in v.skipped.items():
        lines.append(f"  {name}: FP32 ({why})")
    g = v.gate
    if g is not None:
        for run, row in g.runs.items():
            lines.append(
                f"  {run}: CIDEr-D {row['cider_d_fp32']:.4f} -> {row['cider_d_int8']:.4f} "
                f"({row['cider_d_rel_change']:+.2%}), top-1 identical {row['top1_agreement']:.1%} "
                f"of {row['images']:.0f} images"
            )
        for run, row in g.systematicity.items():
            parts = [
                f"{part.replace('_', '-')} R@5 {row[f'recall5_{part}_fp32'] * 100:.2f} -> "
                f"{row[f'recall5_{part}_int8'] * 100:.2f} ({row[f'recall5_{part}_delta_points']:+.2f} pts)"
                for part in ("held_out", "seen")
                if f"recall5_{part}_fp32" in row
            ]
            lines.append(f"  {run} systematicity: " + ", ".join(parts))
        lines += [f"  note: {n}" for n in g.notes]
        lines += [f"  FAILED: {f}" for f in g.failures]
        lines.append(
            f"gate: {'passed: served with COMPCAP_PRECISION=int8' if g.passed else 'failed: not served'}"
        )
    lines.append("seconds: " + ", ".join(f"{k} {s:.1f}" for k, s in result.seconds.items()))
    return lines


__all__ = ["METHODS", "QuantizeResult", "Thresholds", "quantize_repo", "report_lines"]
