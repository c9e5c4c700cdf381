"""Which of two equivalent step graphs an import keeps: the plain one (``CrossAttentionStep``) or the
one that projects the cross-attention keys and values once per image (``ImageCacheStep``). Both are
timed on onnxruntime, one thread, on the batch a served step sees under load — ``ROWS`` rows of
``IMAGES`` images (a beam of 4) at half the longest prefix — best of ``REPEATS`` after a warm-up; the
cached graph is kept when it is at least ``MARGIN`` faster (or when the user asks for it). On a tiny
model the one-token pass it adds costs more than it saves; on a ViT-base + GPT-2 it saves most of a
step (README, "Bring your own model")."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

StepForm = Literal["auto", "plain", "cached"]
STEP_FORMS: tuple[str, ...] = ("auto", "plain", "cached")
ROWS, IMAGES, REPEATS = 16, 4, 3
MARGIN = 0.9  # the cached graph must take at most this share of the plain one's time


@dataclass(frozen=True)
class StepTiming:
    """ms per call of each graph on the timing batch, and which one the import kept."""

    plain_ms: float
    cached_ms: float
    width: int
    kept: Literal["plain", "cached"]


def _time(path: Path, feed: dict[str, np.ndarray]) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    session.run(None, feed)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        session.run(None, feed)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def choose(
    plain: Path, cached: Path, memory: tuple[int, int], vocab: int, max_tokens: int, form: StepForm
) -> StepTiming:
    """Time both graphs (``memory``: the per-image (M, D); token ids below ``vocab``; prefixes of half
    ``max_tokens``) and say which to keep under ``form``."""
    if form not in STEP_FORMS:
        raise ValueError(f"form must be one of {STEP_FORMS}, got {form!r}")
    rng = np.random.default_rng(0)
    width = max(2, max_tokens // 2)
    feed: dict[str, np.ndarray] = {
        "memory": rng.standard_normal((IMAGES, *memory)).astype(np.float32),
        "image_index": np.repeat(np.arange(IMAGES), ROWS // IMAGES).astype(np.int64),
        "tokens": rng.integers(0, vocab, (ROWS, width)).astype(np.int64),
        "length": np.full(ROWS, width, dtype=np.int64),
        "state": np.zeros((ROWS, 1), dtype=np.float32),
    }
    plain_ms, cached_ms = _time(plain, feed), _time(cached, feed)
    faster = cached_ms <= MARGIN * plain_ms
    kept: Literal["plain", "cached"] = (
        "cached" if form == "cached" or (form == "auto" and faster) else "plain"
    )
    return StepTiming(plain_ms, cached_ms, width, kept)


__all__ = ["STEP_FORMS", "StepForm", "StepTiming", "choose"]
