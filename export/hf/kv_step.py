"""The "kv" step of an encoder–decoder captioner (ViT + GPT-2's ``decoder``, BLIP's ``text_decoder``):
the model contract's step, version 3, that runs the decoder on ONE new token per row — its
self-attention keys and values carried in the contract's ``state``, its cross-attention computed
against the image's states without projecting them to keys and values at all.

Inputs and outputs: version 3 of ``export.models.step_contract`` (``PooledInputs``: ``state`` the pool of
the previous call's ``state_out``, ``state_new`` the encoder's initial, zero, states of the images new to
the call, never read: a new row's length is 1, it sees no slot, so its index is clamped into the pool and
the pool is never concatenated; ``state_index`` each row's), with ``memory`` the encoder's states
(unchanged: the gradient explanations attribute to it, the domain test reads it), only ``tokens[n,
length[n] - 1]`` read, 1 ≤ ``length`` ≤ ``Tcap``, and ``attention`` the last layer's cross-attention from
the new position averaged over its heads, as ``CrossAttentionStep``'s. The decoder's blocks, embeddings
and head are the transformers modules' own (``export.hf.decoder_layers``); the step computes the
attention.

The state: ``S = layers × 2 × heads × Tcap × head_dim`` floats, viewed as [N, layers, 2 (keys, values),
heads, Tcap, head_dim]; ``Tcap`` is the import's ``max_tokens`` (generate's ``max_length``, the start
token counted: a prefix never exceeds it). A row's keys and values are right-aligned: at a call, the
``length - 1`` tokens before the new one fill the last ``length - 1`` slots, oldest first, and the
slots before them are masked out (whatever they hold). The new token attends to them and to itself;
``state_out`` is the state shifted one slot to the left with the new token's key and value in the last
slot — one concatenation of contiguous blocks over the whole state, no scatter at a row's own
position. Rows keep their slots through a beam reorder because the engine hands a row's parent state
back by ``state_index``; an image's first rows, whose states are the encoder's zeros, see no slot.

The cross-attention is folded into the query and the output (as multi-head latent attention folds
its projections): with the layer's key projection ``k = x W_k + b_k`` and value projection
``v = x W_v + b_v`` of an image state ``x``, head h's score of state m is ``(q_h W_{k,h}^T) · x_m`` up to
``q_h · b_{k,h}``, the same for every m (softmax drops it), and its context is ``(Σ_m p_m x_m) W_{v,h}
+ b_{v,h}`` (the p sum to 1). So a step reads the image's states as they are, [I, M, E], and never
computes the [I, M, 2D] keys and values per layer that ``generate()`` keeps in its cache — nothing per
image is projected, cached, copied or gathered per row. The rows of an image meet its states in one
matrix product: each call lays its rows out by image (``RowSlots``: B slots per image, B the most rows
any image has), so image i's [B·H, E] queries meet its [E, M] states. Absolute learned positions
(GPT-2's ``wpe``, BLIP's BERT embeddings) make the result independent of where a key sits in the
cache; a decoder with rotary or relative positions has no kv step (``decoder_layers`` is None)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypedDict

import numpy as np
import torch
from torch import nn

from export.hf.decoder_layers import DecoderLayers, decoder_layers
from export.hf.step import CrossAttentionStep, ImageCacheStep
from export.models.step_contract import PooledInputs, StepInputs, StepModule, StepOutputs
from service.checks import at_least
from service.engine.state_rows import StateRows, pooled_feed

Tensor = torch.Tensor


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
        return self.layers * 2 * self.heads * self.head_dim * self.slots


def _arange(end: Tensor, device: torch.device) -> Tensor:
    """``torch.arange`` to a 0-d tensor ``end``: the exported graph computes the size (a ``Range`` of a
    value it computed), rather than keeping the one it was traced with."""
    return torch.arange(end, device=device)  # type: ignore[call-overload]


class RowSlots(NamedTuple):
    """A call's rows laid out by image: ``B`` slots per image (B the most rows any image has);
    ``slot`` int64 [N] each row's slot among the I·B (``image_index · B`` + its rank among its image's
    rows), ``row`` int64 [I·B] the row in each slot (0 where empty), ``filled`` float32 [I·B, 1, 1] 1
    where a row is."""

    slot: Tensor
    row: Tensor
    filled: Tensor

    @classmethod
    def of(cls, image_index: Tensor, images: int) -> RowSlots:
        """The layout of rows ``image_index`` int64 [N] over ``images`` images."""
        member = image_index.unsqueeze(1) == torch.arange(images, device=image_index.device).unsqueeze(0)
        rank = (torch.cumsum(member.to(torch.int64), dim=0) * member).sum(dim=1) - 1  # [N]
        width = rank.max() + 1
        slot = image_index * width + rank
        owner = _arange(images * width, image_index.device).unsqueeze(1) == slot.unsqueeze(0)
        rows = torch.arange(image_index.shape[0], device=image_index.device)
        row = (owner.to(torch.int64) * rows.unsqueeze(0)).sum(dim=1)
        filled = owner.any(dim=1).to(torch.float32).view(-1, 1, 1)
        return cls(slot, row, filled)


class _Attention:
    """A call's attention (``export.hf.decoder_layers.Attend``) for ``KeyValueStep``: the pool the rows'
    states come from viewed as slots [R · layers · 2 · Tcap, H · d], each row's parent slots 1 … Tcap - 1
    as indices into it, the visible-slot mask, the image states and their row layout; it keeps each
    layer's keys and values as ``state_out`` holds them and the last layer's cross-attention."""

    def __init__(
        self,
        step: KeyValueStep,
        pool: Tensor,
        index: Tensor,
        mask: Tensor,
        memory: Tensor,
        image_index: Tensor,
    ) -> None:
        shape = step.shape
        self.step, self.mask = step, mask
        width = shape.heads * shape.head_dim
        self.slots_of = pool.reshape(-1, width)  # every slot of every pooled row
        later = torch.arange(1, shape.slots, device=index.device)  # a parent's slots but its oldest
        # [N, Tcap - 1]: row n's parent's slots 1 … Tcap - 1 of layer 0's keys
        self.parents = (index * (shape.layers * 2 * shape.slots)).unsqueeze(1) + later
        # [1, H, 1, H]: a row's query of each head on the diagonal of an [H · d, H] block matrix
        self.diagonal = torch.eye(shape.heads, device=index.device).view(1, shape.heads, 1, shape.heads)
        self.memory, self.memory_t = memory, memory.transpose(1, 2)  # [I, M, E], [I, E, M]
        self.slots = RowSlots.of(image_index, memory.shape[0])
        self.written: list[Tensor] = []  # per layer, keys then values: the parent's, then the new token's
        self.cross_weights: Tensor | None = None  # the last layer's [N, H, M]

    def _past(self, layer: int, kind: int) -> Tensor:
        """Layer ``layer``'s keys (``kind`` 0) or values (1) of each row's parent, but the oldest:
        [N, Tcap - 1, H · d]."""
        return self.slots_of[self.parents + (layer * 2 + kind) * self.step.shape.slots]

    def self_attention(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        shape = self.step.shape
        rows, heads = q.shape[0], shape.heads
        keys, values = self._past(layer, 0), self._past(layer, 1)
        self.written += [keys.reshape(rows, -1), k, values.reshape(rows, -1), v]
        scale = self.step.layers.scaling(layer, cross=False)
        # each head's scores as one product with the queries on a block diagonal: [N, Tcap - 1, H]
        blocks = (q.reshape(rows, heads, shape.head_dim, 1) * self.diagonal).reshape(rows, -1, heads)
        past = torch.matmul(keys, blocks) * scale + self.mask
        own = (q * k).reshape(rows, heads, shape.head_dim).sum(dim=-1) * scale  # [N, H]
        p = torch.softmax(torch.cat([past, own.unsqueeze(1)], dim=1), dim=1)  # [N, Tcap, H]
        mixed = torch.matmul(p[:, :-1].transpose(1, 2), values)  # [N, H, H · d]: head h's row, all heads
        mixed = (
            mixed.reshape(rows, heads, heads, shape.head_dim) * self.diagonal.view(1, heads, heads, 1)
        ).sum(2)
        context = mixed + p[:, -1].unsqueeze(-1) * v.reshape(rows, heads, shape.head_dim)
        return context.reshape(rows, heads * shape.head_dim)

    def cross_attention(self, layer: int, q: Tensor) -> Tensor:
        step, shape, slots = self.step, self.step.shape, self.slots
        rows, images = q.shape[0], self.memory.shape[0]
        heads, encoder_dim = shape.heads, step.layers.encoder_dim
        q = q.reshape(rows, heads, shape.head_dim).transpose(0, 1)  # [H, N, d]
        folded = torch.matmul(q, step.query_fold[layer]).transpose(0, 1)  # [N, H, E], scaled
        laid = (folded[slots.row] * slots.filled).reshape(images, -1, encoder_dim)  # [I, B·H, E]
        p = torch.softmax(torch.matmul(laid, self.memory_t), dim=-1)  # [I, B·H, M]
        if layer == shape.layers - 1:
            self.cross_weights = p.reshape(-1, heads, p.shape[-1])[slots.slot]  # [N, H, M]
        mixed = torch.matmul(p, self.memory).reshape(-1, heads, encoder_dim)[slots.slot]  # [N, H, E]
        context = torch.matmul(mixed.transpose(0, 1), step.value_fold[layer]).transpose(0, 1)  # [N, H, d]
        return context.reshape(rows, heads * shape.head_dim) + step.value_bias[layer]


class KeyValueStep(StepModule):
    """The kv step (module docstring) around a decoder taken apart (``layers``), for prefixes of at
    most ``slots`` tokens. Each layer's cross-attention key projection is kept folded per head,
    ``query_fold`` [H, d, E] (its scaling inside), its value projection ``value_fold`` [H, E, d]."""

    def __init__(self, layers: DecoderLayers, slots: int) -> None:
        super().__init__()
        at_least(2, slots=slots)
        self.layers = layers
        self.shape = CacheShape(layers.layers, layers.heads, layers.head_dim, int(slots))
        heads, d, e = layers.heads, layers.head_dim, layers.encoder_dim
        query_fold, value_fold, value_bias = [], [], []
        with torch.no_grad():
            for layer in range(layers.layers):
                w_key, _, w_value, b_value = layers.cross_projections(layer)
                scale = layers.scaling(layer, cross=True)
                query_fold.append((w_key.reshape(e, heads, d).permute(1, 2, 0) * scale).contiguous())
                value_fold.append(w_value.reshape(e, heads, d).permute(1, 0, 2).contiguous())
                value_bias.append(b_value.clone())
        self.query_fold = nn.ParameterList([nn.Parameter(w, requires_grad=False) for w in query_fold])
        self.value_fold = nn.ParameterList([nn.Parameter(w, requires_grad=False) for w in value_fold])
        self.value_bias = nn.ParameterList([nn.Parameter(b, requires_grad=False) for b in value_bias])

    @property
    def state_dim(self) -> int:
        return self.shape.state_dim

    def forward(self, *inputs: Tensor) -> StepOutputs:
        """Contract v3 (``PooledInputs``, module docstring): each row's history read from the pool
        ``state`` by ``state_index``; ``state_new`` (zeros) is never read."""
        pooled = PooledInputs(*inputs)

        # a row whose index is past the pool is new: its length is 1, so it sees none of its parent's
        # slots and may read any pooled row's (the contract's pool has a row whenever a call has rows);
        # read from ``state`` alone, the pool is never copied into a concatenation with ``state_new``
        def count(rows: Tensor) -> Tensor:  # a block's rows, as the graph sees them
            return torch.ones_like(rows[:, 0], dtype=torch.int64).sum()

        # ``state_new``'s count times 0 keeps it an input of the graph: the engine tells v3 by its name
        last = count(pooled.state) - 1 + 0 * count(pooled.state_new)
        index = torch.minimum(pooled.state_index, last)
        return self._decode(
            pooled.memory, pooled.image_index, pooled.tokens, pooled.length, pooled.state, index
        )

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        """The step on each row's own state [N, S]."""
        rows = torch.arange(inputs.tokens.shape[0], device=inputs.tokens.device)
        return self._decode(
            inputs.memory, inputs.image_index, inputs.tokens, inputs.length, inputs.state, rows
        )

    def _decode(
        self, memory: Tensor, image_index: Tensor, tokens: Tensor, length: Tensor, pool: Tensor, index: Tensor
    ) -> StepOutputs:
        """One new token per row (row n's state is row ``index[n]`` of ``pool``): the keys and values of
        its prefix read from its state, those of the new token added."""
        shape = self.shape
        last = length - 1  # [N]: the new token's position
        slots = torch.arange(shape.slots, device=tokens.device).unsqueeze(0)  # [1, Tcap]
        hidden_score = torch.full((), torch.finfo(torch.float32).min, device=tokens.device)
        seen = slots[:, :-1] >= shape.slots - length.unsqueeze(1)  # [N, Tcap - 1]: the parent's prefix
        mask = torch.where(seen, torch.zeros_like(hidden_score), hidden_score).unsqueeze(2)
        attend = _Attention(self, pool, index, mask, memory, image_index)
        hidden = self.layers.embed(tokens.gather(1, last.unsqueeze(1)).squeeze(1), last)
        for layer in range(shape.layers):
            hidden = self.layers.block(layer, hidden, attend)
        logprobs = torch.log_softmax(self.layers.logits(hidden).to(torch.float32), dim=-1)
        assert attend.cross_weights is not None
        return logprobs, torch.cat(attend.written, dim=1), attend.cross_weights.mean(dim=1)


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
        pooled = StateRows(
            pool, np.zeros((len(joining), width), np.float32), np.array([r for _, _, r in rows], np.int64)
        )
        feed = {
            "memory": memory_np,
            "image_index": np.array([i for i, _, _ in rows], dtype=np.int64),
            "tokens": tokens,
            "length": np.array([len(p) for _, p, _ in rows], dtype=np.int64),
            **pooled_feed(pooled),
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


class DecoderSteps(TypedDict):
    """``Adapted``'s three step forms around one text decoder (``decoder_steps``; no kv step for a
    decoder ``export.hf.decoder_layers`` does not take apart)."""

    step: nn.Module
    cached_step: nn.Module
    kv_step: nn.Module | None


def decoder_steps(decoder: nn.Module, start: int, max_tokens: int) -> DecoderSteps:
    """The plain, image-cache and kv steps around an encoder–decoder captioner's text decoder that
    cross-attends to the image (``start`` begins every prefix; prefixes of at most ``max_tokens``)."""
    return DecoderSteps(
        step=CrossAttentionStep(decoder),
        cached_step=ImageCacheStep(decoder, start),
        kv_step=KeyValueStep(layers, max_tokens) if (layers := decoder_layers(decoder)) is not None else None,
    )


__all__ = [
    "CacheShape",
    "DecoderSteps",
    "KeyValueStep",
    "RowSlots",
    "ZeroState",
    "decode_parity",
    "decoder_steps",
]
