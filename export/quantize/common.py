"""What every step of ``compcap quantize`` shares: thresholds, the result, the recording backend, the
worlds it calibrates and evaluates on, the runs it compares."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from service.backends.onnxruntime.backend import OnnxRuntimeBackend
from service.engine.engine import CaptionEngine
from service.engine.settings import CoreSettings
from service.manifest import Manifest, PrecisionVariant
from service.text.vocabulary import Vocabulary

PRECISION = "int8"  # the default precision of ``compcap quantize`` (``--precision``)
SUFFIX = "_int8"  # its variants' suffix (each precision's: ``PrecisionSpec.suffix``)
METHODS = ("auto", "dynamic", "static")  # INT8's --method values
MIN_COLUMNS = 8  # a MatMul/Gemm weight with fewer output columns stays FP32 (matrix-vector)
CALIBRATION_CALLS = 48  # most recorded calls per model
# most bytes of recorded inputs per model: a real-size imported step's calls carry every row's key/value
# history (1.2 MB a row for ViT-base + GPT-2), and 48 of them filled 14 GB; past it the largest are kept
CALIBRATION_BYTES = 512 * 1024 * 1024
BEAM_SIZE = 5
RERANK_BEAM = 100  # the probes' re-ranked runs (BUTR+RR), as the probe schedule's default
console = Console(stderr=True)


@dataclass(frozen=True)
class Thresholds:
    """The gate: CIDEr-D within ``cider_d_rel_change`` relative, top-1 identical on >= ``top1_agreement``
    of images, the systematicity mean Recall@5 within ``recall5_points``. The defaults are INT8's (2%,
    90%, 1 point); each precision has its own (``export.quantize.precisions``: FP16 1%, 95%, 1)."""

    cider_d_rel_change: float = 0.02
    top1_agreement: float = 0.90
    recall5_points: float = 1.0


@dataclass
class QuantizeResult:
    variant: PrecisionVariant
    manifest: Manifest
    seconds: dict[str, float] = field(default_factory=dict)
    precision: str = PRECISION


# -- calibration: every model call's inputs while the FP32 engine captions training-world images ------


class RecordingBackend:
    """Wraps a backend; keeps the inputs of the first ``limit`` calls per model, at most ``budget`` bytes
    of them: where a call would pass it, it takes the place of the smallest kept call if it is larger
    (the timing of a variant reads the largest call)."""

    def __init__(
        self, inner: OnnxRuntimeBackend, limit: int = CALIBRATION_CALLS, budget: int = CALIBRATION_BYTES
    ) -> None:
        self.inner, self.limit, self.budget = inner, limit, budget
        self.calls: dict[str, list[dict[str, np.ndarray]]] = {}
        self.seen: dict[str, int] = {}

    async def infer(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kept = self.calls.setdefault(model, [])
        self.seen[model] = self.seen.get(model, 0) + 1
        size = sum(np.asarray(v).nbytes for v in inputs.values())
        held = sum(_nbytes(call) for call in kept)
        if len(kept) < self.limit and held + size <= self.budget:
            kept.append({k: np.array(v, copy=True) for k, v in inputs.items()})
        elif held + size > self.budget and size > (smallest := min(_nbytes(call) for call in kept)):
            kept[[_nbytes(call) for call in kept].index(smallest)] = {
                k: np.array(v, copy=True) for k, v in inputs.items()
            }
        return await self.inner.infer(model, inputs)

    async def close(self) -> None:
        await self.inner.close()


def _nbytes(call: dict[str, np.ndarray]) -> int:
    return sum(v.nbytes for v in call.values())


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
    from sceneworld.dataset import generate

    images, captions, _ = generate(n, seed=seed, image_size=size)
    return images, captions


def engine_settings(repo: Path, manifest: Manifest | None = None, **overrides: Any) -> CoreSettings:
    """The engine's and the backends' settings (``COMPCAP_*``) with the precision left to the backend
    each run builds; with ``manifest``, step calls of at most ``gate_rows(manifest)`` rows."""
    settings = CoreSettings(repo=repo, precision="fp32", max_beam_size=RERANK_BEAM, **overrides)
    if manifest is None:
        return settings
    rows = min(settings.max_rows_per_step, gate_rows(manifest))
    return settings.model_copy(update={"max_rows_per_step": rows})


GATE_STATE_BYTES = 512 * 2**20  # a gate's step call: its rows' states in and out, at most


def gate_rows(manifest: Manifest) -> int:
    """The most rows a step call of the gate or the calibration holds: as many as keep the widest
    captioner's states in and out (2 × rows × ``state_dim`` floats) within ``GATE_STATE_BYTES``, but at
    least a re-ranked run's beam. A real-size import's kv state is 1.5 MB a row: at the engine's 512
    rows, 100 images' calls held 22 GB and the gate was killed for memory; at 100 rows, 7.7 GB."""
    widest = max((cap.state_dim for cap in manifest.captioners), default=1)
    return max(RERANK_BEAM, GATE_STATE_BYTES // (2 * 4 * max(widest, 1)))


def open_backend(repo: Path, manifest: Manifest, precision: str) -> OnnxRuntimeBackend:
    """The embedded backend the gate decodes through, on ``COMPCAP_DEVICE`` (auto: CUDA where it can be
    used, else the CPU) as a gateway would serve it."""
    s = engine_settings(repo)
    return OnnxRuntimeBackend(
        repo,
        manifest,
        s.intra_op_threads,
        None,
        s.executor_threads,
        s.ort_spinning,
        precision,
        device=s.device,
    )


def runs(manifest: Manifest) -> list[tuple[str, str | None]]:
    """Each captioner plain, then re-ranked by its own ranker or vsepp (``compcap-lab evaluate``'s runs)."""
    from export.packaging.runs import runs_for

    return runs_for(manifest)


def label(run: tuple[str, str | None]) -> str:
    return f"{run[0]}+{run[1]}" if run[1] else run[0]


async def caption_runs(
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
    engine = CaptionEngine(recorder, manifest, vocab, engine_settings(repo, manifest))
    try:
        await caption_runs(engine, images, runs(manifest))
    finally:
        await engine.close()
        await recorder.close()
    return recorder.calls
