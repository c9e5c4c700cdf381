"""The null backend (``COMPCAP_BACKEND=null``): no models, outputs of the right shapes at (almost) zero
cost. It measures the gateway's own ceiling — the captions/s CompCap could serve on an infinitely
fast device — on any machine (``compcap bench --backend null``, docs/benchmarks.md). Its captions end
but mean nothing; it reads no model file, only the manifest.

What each role returns (shapes from the manifest, a -1 resolved from the inputs):

- ``visual_encoder``: ``regions`` zeros [I, R, D]; ``<cap>_init`` / ``<cap>_encoder``: ``memory`` zeros
  [I, M, Dm] and ``state`` zeros [I, S] (of each captioner's ``memory_dims`` / ``state_dim`` where the
  manifest's dims are variable);
- ``<cap>_step``: ``logprobs`` [N, V] (V from the manifest), ``state_out`` [N, S], ``attention`` [N, M]
  uniform; with ``top_k``, ``top_logprobs`` / ``top_tokens`` [N, k] and ``eos_logprob`` [N], where the
  manifest declares them. A version 3 step (``state`` / ``state_new`` / ``state_index``) has N =
  ``len(state_index)`` rows;
- rankers: ``embedding`` [I, J] L2-normalised: one fixed vector per image, one of a few fixed vectors per
  caption (chosen by the sum of its tokens), so that re-ranking has something to order.

The log-probs are rows of a table precomputed per captioner: ``table[p, k]`` is a log-softmax row for a
prefix of ``p`` words whose last token is ``k`` modulo ``VARIANTS`` (the beams of an image then
differ). Before ``end_words(cap)`` words (9, fewer for a captioner with a shorter ``max_length``) the
end token is unlikely (``EOS_EARLY``) and the words follow a Zipf law over a permutation of the
vocabulary; from then on the end token takes almost all the mass, so that greedy and beam search both
end their captions there (later where a request's ``min_length`` asks, never earlier). A step costs
one gather of N rows of that table (O(N·V) copying, no Python loop per row), or of their precomputed
top k only (O(N·k)) when only the top k are asked.

The prefix length ``p`` of a row: ``length - 1`` for a captioner that reads the whole prefix; for one
that reads only its last token (``reads == "last_token"``, T = 1) the backend counts the words in the
row's own state, ``state_out[:, 0] = state[:, 0] + 1`` (the rest of the state zeros), which beam search
reorders with its beams as it does a real recurrent state.

Calls run on the event loop (no thread pool: nothing here blocks for long at the shipped vocabulary
sizes). ``devices`` says ``none`` for every model: ``GET /v1/models`` and ``/healthz`` report device
``none``, ``compcap_model_device_info`` device ``none``, provider ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.backends.base import Backend, BackendError, DeviceArray, host_array
from service.checks import at_least
from service.manifest import CaptionerEntry, Manifest, ModelEntry
from service.metrics import Metrics

END_WORDS = 9  # words before the end token becomes the best (the captions' length)
VARIANTS = 8  # distinct rows per prefix length, chosen by the last token
EOS_EARLY = -25.0  # the end token's log-prob before END_WORDS words
SPECIAL = -30.0  # BOS, PAD and UNK: never chosen
WORDS_LATE = -20.0  # every word's logit (before normalisation) once the end token should come
ZIPF = 1.1  # word probability ∝ rank ** -ZIPF
TOP_KEPT = 64  # each table row's best words kept sorted, for top-k steps (more are sorted per call)
EMBEDDINGS = 16  # distinct caption embeddings per ranker
SEED = 20261139


def end_words(cap: CaptionerEntry) -> int:
    """The words a caption of ``cap`` has under this backend: ``END_WORDS``, fewer where the captioner's
    ``max_length`` is shorter (the engine would end it there anyway)."""
    return max(1, min(END_WORDS, cap.max_length - 1))


def logprob_table(vocab: int, words: int, special: Sequence[int], eos: int, seed: int) -> np.ndarray:
    """float32 [words + 1, VARIANTS, vocab] log-softmax rows: ``[p, k]`` for a prefix of ``p`` words
    (``p`` = ``words``: every longer one) whose last token is ``k`` modulo ``VARIANTS`` (module
    docstring). Deterministic in ``seed``."""
    if not 0 <= eos < vocab:
        raise ValueError(f"eos must be in [0, {vocab}), got {eos}")
    rng = np.random.default_rng(seed)
    zipf = -ZIPF * np.log(np.arange(1, vocab + 1, dtype=np.float64))
    logits = np.empty((words + 1, VARIANTS, vocab), dtype=np.float64)
    for p in range(words):
        for k in range(VARIANTS):
            logits[p, k, rng.permutation(vocab)] = zipf
    logits[:words, :, eos] = -np.inf  # set below, after normalising the words
    logits[words] = WORDS_LATE
    logits[words, :, eos] = 0.0
    banned = [s for s in special if 0 <= s < vocab and s != eos]
    logits[:, :, banned] = -np.inf
    log_z = np.log(np.exp(logits - logits.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True))
    table = logits - logits.max(axis=-1, keepdims=True) - log_z
    table[:words, :, eos] = EOS_EARLY
    table[:, :, banned] = SPECIAL
    return table.astype(np.float32)


@dataclass(frozen=True)
class _StepTable:
    """One captioner's precomputed rows (``logprob_table``) and their best words, sorted."""

    table: np.ndarray  # float32 [P, VARIANTS, V]
    top_tokens: np.ndarray  # int64 [P, VARIANTS, min(TOP_KEPT, V)]
    top_logprobs: np.ndarray  # float32 [P, VARIANTS, min(TOP_KEPT, V)]
    eos: int
    last_token: bool  # it reads only the last token: the prefix length is counted in the state

    @classmethod
    def build(
        cls, cap: CaptionerEntry, vocab: int, special: Sequence[int], eos: int, seed: int
    ) -> _StepTable:
        table = logprob_table(vocab, end_words(cap), special, eos, seed)
        kept = min(TOP_KEPT, vocab)
        order = np.argsort(-table, axis=-1, kind="stable")[..., :kept]
        top = np.take_along_axis(table, order, axis=-1)
        return cls(table, order.astype(np.int64), top, eos, cap.reads == "last_token")


def _unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


class NullBackend:
    """The ``Backend`` of no models (module docstring). ``infer(model, inputs, outputs=None)`` as the
    embedded backend's, without ``keep`` (every output is a host array)."""

    def __init__(self, manifest: Manifest, metrics: Metrics | None = None) -> None:
        self.manifest = manifest
        self.models: dict[str, ModelEntry] = {m.name: m for m in manifest.models}
        self.devices: dict[str, str] = dict.fromkeys(self.models, "none")
        if metrics is not None:  # compcap_model_device_info: no device, no provider
            for name in self.models:
                metrics.model_device.labels(model=name, device="none", provider="null").set(1)
        vocab = manifest.vocabulary
        self._captioner: dict[str, CaptionerEntry] = {}
        for cap in manifest.captioners:
            self._captioner[cap.init] = self._captioner[cap.step] = cap
        self._steps: dict[str, _StepTable] = {}
        for n, cap in enumerate(manifest.captioners):
            spec = cap.tokens
            special = (spec.bos_id, spec.pad_id) if spec else (vocab.bos_id, vocab.pad_id, vocab.unk_id)
            eos = spec.eos_id if spec else vocab.eos_id
            self._steps[cap.step] = _StepTable.build(cap, self._vocab_size(cap), special, eos, SEED + n)
        self._embeddings: dict[str, np.ndarray] = {}
        for n, ranker in enumerate(manifest.rankers):
            rows = _unit_rows(EMBEDDINGS + 1, ranker.embedding_dim, SEED + 1000 + n)
            self._embeddings[ranker.image] = rows[:1]
            self._embeddings[ranker.text] = rows[1:]

    def _vocab_size(self, cap: CaptionerEntry) -> int:
        """``V`` of ``cap``'s step: its ``logprobs`` dims, else its tokenizer's or the vocabulary's size
        (as ``ModelRunner`` reads it)."""
        for spec in self.models[cap.step].outputs:
            if spec.name == "logprobs" and len(spec.dims) == 2 and spec.dims[1] > 0:
                return spec.dims[1]
        return cap.tokens.size if cap.tokens else self.manifest.vocabulary.size

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray | DeviceArray],
        outputs: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """``outputs`` of ``model`` (all it declares when None) for ``inputs``; a ``BackendError`` for a
        model not in the manifest, an output it does not declare, or inputs it lacks."""
        entry = self.models.get(model)
        if entry is None:
            raise BackendError(model, "unknown_model", "no such model in the repository")
        declared = [o.name for o in entry.outputs]
        names = declared if outputs is None else list(outputs)
        if not set(names) <= set(declared):
            raise BackendError(model, "bad_input", f"no outputs {sorted(set(names) - set(declared))}")
        arrays = {name: host_array(value) for name, value in inputs.items()}
        try:
            if entry.role == "captioner_step":
                return self._step(entry, arrays, names)
            return self._per_item(entry, arrays, names)
        except (KeyError, IndexError, ValueError) as exc:
            raise BackendError(model, "bad_input", f"{type(exc).__name__}: {exc}") from exc

    # -- per-image models -------------------------------------------------------------------------

    def _per_item(self, entry: ModelEntry, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, Any]:
        first = inputs[entry.inputs[0].name]
        n = int(first.shape[0])
        out: dict[str, Any] = {}
        for spec in entry.outputs:
            if spec.name not in names:
                continue
            if spec.name == "embedding":
                out[spec.name] = self._embedding(entry, inputs, n)
                continue
            dims = list(spec.dims[1:] if entry.max_batch_size == 0 else spec.dims)
            if -1 in dims:
                dims = self._known_dims(entry, spec.name, dims)
            out[spec.name] = np.zeros((n, *dims), dtype=_dtype(spec.dtype))
        return out

    def _known_dims(self, entry: ModelEntry, name: str, dims: list[int]) -> list[int]:
        """Variable per-item dims: a captioner's ``memory_dims`` / ``state_dim``; 1 where nothing says."""
        cap = self._captioner.get(entry.name)
        if cap is not None and name == "memory" and len(dims) == 2:
            return list(cap.memory_dims)
        if cap is not None and name == "state" and len(dims) == 1:
            return [cap.state_dim]
        return [d if d > 0 else 1 for d in dims]

    def _embedding(self, entry: ModelEntry, inputs: dict[str, np.ndarray], n: int) -> np.ndarray:
        rows = self._embeddings[entry.name]
        if entry.role != "ranker_text":
            return np.repeat(rows, n, axis=0)
        tokens = inputs["tokens"].reshape(n, -1)
        return rows[tokens.sum(axis=1) % len(rows)]

    # -- the step ---------------------------------------------------------------------------------

    def _step(self, entry: ModelEntry, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, Any]:
        table = self._steps[entry.name]
        tokens, length = inputs["tokens"], inputs["length"].reshape(-1)
        state = inputs["state"]
        if "state_index" in inputs:  # contract v3: concat(state, state_new)[state_index]
            index = inputs["state_index"].reshape(-1)
            counts = np.concatenate([state[:, :1], inputs["state_new"][:, :1]])[index, 0]
            width = int(inputs["state_new"].shape[1])
        else:
            counts = state[:, 0] if state.shape[1] else np.zeros(len(state), dtype=np.float32)
            width = int(state.shape[1])
        n = int(tokens.shape[0])
        if len(counts) != n or len(length) != n:
            raise ValueError(f"{n} rows of tokens, {len(length)} lengths and {len(counts)} states")
        last = tokens[np.arange(n), np.clip(length, 1, tokens.shape[1]) - 1]
        # words so far: counted in the state (last-token readers), else the prefix's length less BOS
        words = counts.astype(np.int64) if table.last_token and width else length.astype(np.int64) - 1
        position = np.clip(words, 0, table.table.shape[0] - 1)
        variant = last % VARIANTS
        out: dict[str, Any] = {}
        if "logprobs" in names:
            out["logprobs"] = table.table[position, variant]
        if "state_out" in names:
            state_out = np.zeros((n, width), dtype=np.float32)
            if width:
                state_out[:, 0] = words + 1
            out["state_out"] = state_out
        if "attention" in names:
            slots = int(inputs["memory"].shape[1]) if inputs["memory"].ndim > 1 else 1
            out["attention"] = np.full((n, slots), 1.0 / max(slots, 1), dtype=np.float32)
        if {"top_logprobs", "top_tokens"} & set(names):
            k = int(inputs["top_k"].reshape(-1)[0])
            at_least(1, top_k=k)
            if k <= table.top_tokens.shape[-1]:
                top_tokens = table.top_tokens[position, variant, :k]
                top_logprobs = table.top_logprobs[position, variant, :k]
            else:  # more than were kept sorted: sort these rows
                rows = table.table[position, variant]
                top_tokens = np.argsort(-rows, axis=-1, kind="stable")[:, :k]
                top_logprobs = np.take_along_axis(rows, top_tokens, axis=-1)
            out["top_tokens"], out["top_logprobs"] = top_tokens, top_logprobs
        if "eos_logprob" in names:
            out["eos_logprob"] = table.table[position, variant, table.eos]
        for spec in entry.outputs:  # anything else a step declares: zeros, one row per row
            if spec.name in names and spec.name not in out:
                rest = [d if d > 0 else 1 for d in spec.dims[1:]]
                out[spec.name] = np.zeros((n, *rest), dtype=_dtype(spec.dtype))
        return {name: out[name] for name in names}

    async def close(self) -> None:
        return None


def _dtype(name: str) -> np.dtype[Any]:
    return np.dtype({"FP32": "float32", "INT64": "int64", "UINT8": "uint8"}[name])


__all__ = ["NullBackend", "end_words", "logprob_table"]


async def build(settings: Any, manifest: Manifest, metrics: Metrics) -> Backend:
    """The null backend of ``manifest`` (the registry's ``null`` record): it reads no model file, no
    other setting."""
    return NullBackend(manifest, metrics)
