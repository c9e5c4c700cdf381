"""Which of three equivalent step graphs an import keeps:

- ``plain`` (``export.hf.step.CrossAttentionStep``): the decoder on each row's whole prefix, the
  image's cross-attention keys and values projected for every row;
- ``cached`` (``ImageCacheStep``): the same, with the cross-attention keys and values projected once
  per image of the call;
- ``kv`` (``export.hf.kv_step.KeyValueStep``, model contract v3): each row's self-attention keys and
  values carried in the contract's ``state``, so that a step runs the decoder on one new token per row,
  and the cross-attention folded into the query and output, so that no image state is projected to
  keys and values at all.

Each graph the import exports is timed on onnxruntime, one thread, on the batch a served step sees
under load — ``ROWS`` rows of ``IMAGES`` images (a beam of 4) at half the longest prefix, the kv graph
with its state pool of the previous call's ``ROWS`` rows reordered as a beam does — best of
``REPEATS`` after a warm-up. ``auto`` keeps the fastest of the cached and kv graphs where it takes at
most ``MARGIN`` of the plain graph's time, else the plain one; ``cached`` / ``kv`` keep that graph
(timed beside the plain one for the report), ``plain`` times nothing. On a tiny model the one-token
pass the cached graph adds costs more than it saves; on a ViT-base + GPT-2 the kv graph takes a
fraction of the plain one's time (docs/bring-your-own-model.md, "Speed")."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

StepForm = Literal["auto", "plain", "cached", "kv"]
KeptForm = Literal["plain", "cached", "kv"]
STEP_FORMS: tuple[str, ...] = ("auto", "plain", "cached", "kv")
ROWS, IMAGES, REPEATS = 16, 4, 3
MARGIN = 0.9  # a cached or kv graph must take at most this share of the plain one's time


@dataclass(frozen=True)
class StepTiming:
    """ms per call of each graph timed on the timing batch (None: not exported), the prefix width it
    had, and which graph the import kept."""

    plain_ms: float
    cached_ms: float | None
    width: int
    kept: KeptForm
    kv_ms: float | None = None

    def summary(self) -> str:
        """One line: each timed graph's ms per call, and the one kept."""
        timed = {"plain": self.plain_ms, "image cache": self.cached_ms, "kv cache": self.kv_ms}
        shown = ", ".join(f"{form} {ms:.2f} ms" for form, ms in timed.items() if ms is not None)
        return f"{shown} per call ({ROWS} rows of {IMAGES} images, {self.width} tokens): kept {self.kept}"


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


def timing_feeds(
    memory: tuple[int, int], vocab: int, max_tokens: int, state_dim: int | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None, int]:
    """The timing batch (module docstring) as the plain / cached graphs' feed and the kv graph's (None
    without ``state_dim``), and its prefix width."""
    rng = np.random.default_rng(0)
    width = max(2, max_tokens // 2)
    feed: dict[str, np.ndarray] = {
        "memory": rng.standard_normal((IMAGES, *memory)).astype(np.float32),
        "image_index": np.repeat(np.arange(IMAGES), ROWS // IMAGES).astype(np.int64),
        "tokens": rng.integers(0, vocab, (ROWS, width)).astype(np.int64),
        "length": np.full(ROWS, width, dtype=np.int64),
        "state": np.zeros((ROWS, 1), dtype=np.float32),
    }
    if state_dim is None:
        return feed, None, width
    beams = ROWS // IMAGES  # each row continues from a parent of its own image, as beam search reorders
    parents = (feed["image_index"] * beams + rng.integers(0, beams, ROWS)).astype(np.int64)
    kv = {
        **feed,
        "state": rng.standard_normal((ROWS, state_dim)).astype(np.float32),
        "state_new": np.zeros((0, state_dim), dtype=np.float32),
        "state_index": parents,
    }
    return feed, kv, width


def choose(
    plain: Path,
    cached: Path | None,
    memory: tuple[int, int],
    vocab: int,
    max_tokens: int,
    form: StepForm,
    kv: Path | None = None,
    state_dim: int | None = None,
) -> StepTiming:
    """Time the graphs given (``memory``: the per-image (M, D); token ids below ``vocab``; prefixes of
    half ``max_tokens``; ``kv`` with its ``state_dim``) and say which to keep under ``form``."""
    if form not in STEP_FORMS:
        raise ValueError(f"form must be one of {STEP_FORMS}, got {form!r}")
    if kv is not None and state_dim is None:
        raise ValueError("a kv graph is timed with its state_dim")
    if form in ("cached", "kv") and {"cached": cached, "kv": kv}[form] is None:
        raise ValueError(f"form {form!r}: its graph was not given")
    feed, kv_feed, width = timing_feeds(memory, vocab, max_tokens, state_dim if kv is not None else None)
    plain_ms = _time(plain, feed)
    cached_ms = _time(cached, feed) if cached is not None else None
    kv_ms = _time(kv, kv_feed) if kv is not None and kv_feed is not None else None
    kept: KeptForm = "plain"
    if form == "cached" or form == "kv":
        kept = form
    elif form == "auto":
        forms: tuple[tuple[float | None, KeptForm], ...] = ((cached_ms, "cached"), (kv_ms, "kv"))
        timed = [(ms, f) for ms, f in forms if ms is not None]
        if timed and min(timed)[0] <= MARGIN * plain_ms:
            kept = min(timed)[1]
    return StepTiming(plain_ms, cached_ms, width, kept, kv_ms)


__all__ = ["STEP_FORMS", "KeptForm", "StepForm", "StepTiming", "choose", "timing_feeds"]
