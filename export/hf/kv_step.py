"""The "kv" step of an encoder–decoder captioner (ViT + GPT-2's ``decoder``, BLIP's ``text_decoder``):
the model contract's step, version 3, that keeps each row's self-attention keys and values in the
contract's ``state`` so that a step runs the decoder on ONE new token per row, not on the whole prefix.

Inputs and outputs: version 3 of ``export.models.step_contract`` (``PooledInputs``: ``state`` the pool
of the previous call's ``state_out``, ``state_new`` the encoder's initial, zero, states of the images
new to the call, ``state_index`` each row's), with ``memory`` the encoder's states (unchanged: the
gradient explanations attribute to it), only ``tokens[n, length[n] - 1]`` read, 1 ≤ ``length`` ≤
``Tcap``, and ``attention`` the last layer's cross-attention from the new position averaged over its
heads, as ``CrossAttentionStep``'s.

The state: ``S = layers × 2 × heads × Tcap × head_dim`` floats, viewed as [N, layers, 2 (keys, values),
heads, Tcap, head_dim]; ``Tcap`` is the import's ``max_tokens`` (generate's ``max_length``, the start
token counted: a prefix never exceeds it). Slot t holds the keys and values of prefix token t. At a call
the row's slots ``0 .. length - 2`` are filled (its prefix but the last token); the step zeroes the slots
from ``length - 1`` on, hands the ``Tcap`` slots to the decoder as transformers' own ``DynamicCache``
(fixed shapes, with a 4-D additive mask that hides the unfilled slots), runs it on token
``tokens[n, length - 1]`` at position ``length - 1`` (explicit ``position_ids``: rows have different
lengths), takes the keys and values the decoder appended after the ``Tcap`` slots and writes them into
slot ``length - 1`` of ``state_out`` (a one-hot blend, no scatter of data-dependent shape). Rows keep
their slots through a beam reorder because the engine hands a row's parent state back by
``state_index``. The cross-attention keys and values are projected once per image of the call (the
one-token pass of ``ImageCacheStep``) and gathered by ``image_index``, so ``memory`` stays the
encoder's states. Absolute learned positions (GPT-2's ``wpe``, BLIP's BERT embeddings) make the
result independent of where a key sits in the cache; a decoder with rotary or relative positions would
need its own check (GIT is not covered)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from export.hf.step import CrossAttentionStep, ImageCacheStep
from export.models.step_contract import PooledInputs, StepInputs, StepOutputs


@dataclass(frozen=True)
class CacheShape:
    """A self-attention cache's shape: ``layers`` decoder layers of ``heads`` heads of ``head_dim``, for
    prefixes of at most ``slots`` tokens (``Tcap``)."""

    layers: int
    heads: int
    head_dim: int
    slots: int

    @property
    def state_dim(self) -> int:
        """``S`` = layers × 2 × heads × slots × head_dim."""
        return self.layers * 2 * self.heads * self.slots * self.head_dim


class KeyValueStep(ImageCacheStep):
    """The kv step (module docstring) around ``decoder``; ``start`` is the token of the one-token pass
    that projects the cross-attention (``ImageCacheStep``), ``shape`` the cache's."""

    def __init__(self, decoder: nn.Module, start: int, shape: CacheShape) -> None:
        super().__init__(decoder, start)
        self.shape = shape

    @property
    def state_dim(self) -> int:
        return self.shape.state_dim

    def forward(self, *inputs: torch.Tensor) -> StepOutputs:
        """Contract v3 (``PooledInputs``, module docstring): each row's state gathered, then the step."""
        return self.decode_step(PooledInputs(*inputs).gathered())

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        """One new token per row, the keys and values of its prefix read from and written to its state."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        memory, image_index, tokens, length, state = inputs
        shape = self.shape
        rows = tokens.shape[0]
        last = (length - 1).unsqueeze(1)  # [N, 1]: the new token's position, and its slot
        slots = torch.arange(shape.slots, device=tokens.device).unsqueeze(0)  # [1, Tcap]
        seen = slots < last  # [N, Tcap]: the slots already filled
        here = slots == last  # [N, Tcap]: the slot this step fills
        past = state.view(rows, shape.layers, 2, shape.heads, shape.slots, shape.head_dim)
        zero = torch.zeros((), dtype=past.dtype, device=past.device)
        past = torch.where(seen.view(rows, 1, 1, 1, shape.slots, 1), past, zero)
        own = DynamicCache()
        for layer in range(shape.layers):
            own.update(past[:, layer, 0], past[:, layer, 1], layer)
        visible = torch.cat([seen, torch.ones_like(seen[:, :1])], dim=1)  # the Tcap slots, then the new one
        hidden = torch.full((), torch.finfo(torch.float32).min, dtype=torch.float32, device=tokens.device)
        mask = torch.where(visible, torch.zeros_like(hidden), hidden).view(rows, 1, 1, shape.slots + 1)
        out = self.decoder(
            input_ids=tokens.gather(1, last),
            attention_mask=mask,
            position_ids=last,
            encoder_hidden_states=memory.index_select(0, image_index),
            cache=EncoderDecoderCache(own, self.image_cross_cache(memory, image_index)),
            use_cache=True,
            output_attentions=True,
        )
        logprobs = torch.log_softmax(out.logits[:, -1].to(torch.float32), dim=-1)
        attention = out.cross_attentions[-1][:, :, -1].mean(dim=1)
        layers: Any = own.layers  # DynamicLayer: keys, values [N, H, Tcap + 1, d]
        new = torch.stack(
            [torch.stack([cached.keys[:, :, -1], cached.values[:, :, -1]], dim=1) for cached in layers],
            dim=1,
        )  # [N, layers, 2, H, d]
        written = torch.where(here.view(rows, 1, 1, 1, shape.slots, 1), new.unsqueeze(4), past)
        return logprobs, written.reshape(rows, shape.state_dim), attention


class ZeroState(nn.Module):
    """An imported encoder (``image`` → ``memory``, ``state`` [B, 1]) whose ``state`` is the kv step's
    initial one: zeros [B, ``state_dim``] (no slot filled)."""

    def __init__(self, encoder: nn.Module, state_dim: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.state_dim = int(state_dim)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        memory, _ = self.encoder(image)
        return memory, memory.new_zeros(memory.shape[0], self.state_dim)


def decode_parity(
    path: Path,
    reference: nn.Module,
    memory: torch.Tensor,
    start: int,
    vocab: int,
    shape: CacheShape,
    seed: int = 0,
    beams: int = 3,
) -> float:
    """The kv graph at ``path`` on onnxruntime through a whole beam-search-like decode, against
    ``reference`` (the plain step, ``CrossAttentionStep``) on the full prefixes: max abs difference of
    ``logprobs`` and ``attention`` over every call. Image ``i`` of ``memory`` joins at call ``i`` with
    ``beams`` rows (its states in ``state_new``); each call every row continues from a random parent
    of its own image (its state named by ``state_index`` into the previous call's ``state_out``) with a
    random next token, rows shuffled, until a row's prefix would exceed ``shape.slots``; so every slot
    is written and read, and rows of different lengths share a call."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    images, width = int(memory.shape[0]), shape.state_dim
    memory_np = memory.detach().numpy().astype(np.float32)
    live: list[tuple[int, list[int], int]] = []  # (image, prefix, row of the previous state_out)
    pool = np.zeros((0, width), dtype=np.float32)
    worst = 0.0
    for call in range(shape.slots + images - 1):
        joining = [call] if call < images else []
        rows = [(i, p, r) for i, p, r in live if len(p) <= shape.slots]
        rows += [(i, [start], len(pool) + j) for j, i in enumerate(joining) for _ in range(beams)]
        if not rows:
            break
        rows = [rows[k] for k in rng.permutation(len(rows))]
        n, t = len(rows), max(len(p) for _, p, _ in rows)
        tokens = np.full((n, t), vocab - 1, dtype=np.int64)
        for k, (_, prefix, _) in enumerate(rows):
            tokens[k, : len(prefix)] = prefix
        feed = {
            "memory": memory_np,
            "image_index": np.array([i for i, _, _ in rows], dtype=np.int64),
            "tokens": tokens,
            "length": np.array([len(p) for _, p, _ in rows], dtype=np.int64),
            "state": pool,
            "state_new": np.zeros((len(joining), width), dtype=np.float32),
            "state_index": np.array([r for _, _, r in rows], dtype=np.int64),
        }
        logprobs, state_out, attention = session.run(["logprobs", "state_out", "attention"], feed)
        with torch.no_grad():
            expected = reference(
                memory,
                torch.from_numpy(feed["image_index"]),
                torch.from_numpy(tokens),
                torch.from_numpy(feed["length"]),
                torch.zeros(n, 1),
            )
        for got, want in ((logprobs, expected[0]), (attention, expected[2])):
            worst = max(worst, float(np.abs(got - want.numpy()).max()))
        pool = state_out
        live = []
        for image, _, _ in rows:
            siblings = [j for j, row in enumerate(rows) if row[0] == image]
            parent = int(rng.choice(siblings))
            live.append((image, [*rows[parent][1], int(rng.integers(0, vocab))], parent))
    return worst


def cache_shape(config: Any, slots: int) -> CacheShape:
    """The self-attention cache of a decoder config (GPT-2's ``n_layer`` / ``n_head`` / ``n_embd``, or
    BERT-style ``num_hidden_layers`` / ``num_attention_heads`` / ``hidden_size``) for ``slots`` tokens."""
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    return CacheShape(layers, heads, int(config.hidden_size) // heads, int(slots))


class DecoderSteps(TypedDict):
    """``Adapted``'s three step forms around one text decoder (``decoder_steps``)."""

    step: nn.Module
    cached_step: nn.Module
    kv_step: nn.Module


def decoder_steps(decoder: nn.Module, start: int, max_tokens: int) -> DecoderSteps:
    """The plain, image-cache and kv steps around an encoder–decoder captioner's text decoder that
    cross-attends to the image (``start`` begins every prefix; prefixes of at most ``max_tokens``)."""
    return DecoderSteps(
        step=CrossAttentionStep(decoder),
        cached_step=ImageCacheStep(decoder, start),
        kv_step=KeyValueStep(decoder, start, cache_shape(decoder.config, max_tokens)),
    )


__all__ = [
    "CacheShape",
    "DecoderSteps",
    "KeyValueStep",
    "ZeroState",
    "cache_shape",
    "decode_parity",
    "decoder_steps",
]
