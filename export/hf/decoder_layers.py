"""An imported text decoder taken apart into what the kv step (``export.hf.kv_step``) computes itself:
its token and position embedding, each layer's block with the attention left to the caller, each
layer's cross-attention key and value projections, and its output head — around the unchanged
transformers modules and their weights, nothing copied or retrained.

Two decoders: GPT-2 (``GPT2LMHeadModel`` with cross-attention, the decoder of a ViT + GPT-2
``VisionEncoderDecoderModel``; pre-norm blocks) and BLIP's text decoder (``BlipTextLMHeadModel``, a
BERT with cross-attention; post-norm blocks). ``decoder_layers`` says which one a module is (None: a
decoder the kv step does not cover, e.g. one with rotary or relative positions).

A block hands its attention to the caller (``Attend``): ``self_attention(layer, q, k, v)`` with the new
token's query, key and value [N, D] and ``cross_attention(layer, q)`` with its query [N, D], each
returning the heads' context [N, D] before the block's own output projection. The attention's scaling
(``scaling``) is the transformers module's own."""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch
from torch import nn

Tensor = torch.Tensor


class Attend(Protocol):
    """The attention a block leaves to its caller (module docstring)."""

    def self_attention(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...

    def cross_attention(self, layer: int, q: Tensor) -> Tensor: ...


class DecoderLayers(nn.Module):
    """A text decoder taken apart (module docstring): ``layers`` blocks of ``heads`` heads of
    ``head_dim``; the image states it cross-attends to are ``encoder_dim`` wide."""

    def __init__(self, decoder: Any, layers: int, heads: int, width: int, encoder_dim: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.layers = int(layers)
        self.heads = int(heads)
        self.head_dim = int(width) // self.heads
        self.encoder_dim = int(encoder_dim)

    def embed(self, token: Tensor, position: Tensor) -> Tensor:
        """int64 [N] tokens at int64 [N] positions → the first block's input [N, D]."""
        raise NotImplementedError

    def block(self, layer: int, hidden: Tensor, attend: Attend) -> Tensor:
        """Block ``layer`` on [N, D], its attention computed by ``attend`` → [N, D]."""
        raise NotImplementedError

    def logits(self, hidden: Tensor) -> Tensor:
        """The last block's output [N, D] → the next token's logits [N, V]."""
        raise NotImplementedError

    def scaling(self, layer: int, cross: bool) -> float:
        """What the attention scores of ``layer`` (its cross-attention where ``cross``) are scaled by."""
        raise NotImplementedError

    def cross_projections(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Layer ``layer``'s cross-attention key and value projections as ``x @ w + b``: (w_key [E, D],
        b_key [D], w_value [E, D], b_value [D])."""
        raise NotImplementedError


class Gpt2Layers(DecoderLayers):
    """GPT-2 (``GPT2LMHeadModel`` with ``add_cross_attention``): pre-norm blocks of self-attention,
    cross-attention and MLP; learned absolute positions; the head tied to the token embedding."""

    def __init__(self, decoder: Any) -> None:
        config = decoder.config  # GPT-2's cross-attention projects encoder states as wide as its own
        super().__init__(decoder, config.n_layer, config.n_head, config.n_embd, config.n_embd)

    def embed(self, token: Tensor, position: Tensor) -> Tensor:
        body = self.decoder.transformer
        return body.wte(token) + body.wpe(position)

    def block(self, layer: int, hidden: Tensor, attend: Attend) -> Tensor:
        h = self.decoder.transformer.h[layer]
        q, k, v = h.attn.c_attn(h.ln_1(hidden)).split(h.attn.split_size, dim=-1)
        hidden = hidden + h.attn.c_proj(attend.self_attention(layer, q, k, v))
        q = h.crossattention.q_attn(h.ln_cross_attn(hidden))
        hidden = hidden + h.crossattention.c_proj(attend.cross_attention(layer, q))
        return hidden + h.mlp(h.ln_2(hidden))

    def logits(self, hidden: Tensor) -> Tensor:
        return self.decoder.lm_head(self.decoder.transformer.ln_f(hidden))

    def scaling(self, layer: int, cross: bool) -> float:
        h = self.decoder.transformer.h[layer]
        return float((h.crossattention if cross else h.attn).scaling)

    def cross_projections(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        cross = self.decoder.transformer.h[layer].crossattention
        d = cross.split_size
        w, b = cross.c_attn.weight, cross.c_attn.bias  # Conv1D: x @ w + b, w [E, 2D]
        return w[:, :d], b[:d], w[:, d:], b[d:]


class BlipTextLayers(DecoderLayers):
    """BLIP's text decoder (``BlipTextLMHeadModel``): a BERT whose post-norm layers add a
    cross-attention; learned absolute positions, embeddings layer-normed; a transform before the head."""

    def __init__(self, decoder: Any) -> None:
        config = decoder.config
        super().__init__(
            decoder,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.hidden_size,
            config.encoder_hidden_size,
        )

    def embed(self, token: Tensor, position: Tensor) -> Tensor:
        emb = self.decoder.bert.embeddings
        return emb.LayerNorm(emb.word_embeddings(token) + emb.position_embeddings(position))

    def block(self, layer: int, hidden: Tensor, attend: Attend) -> Tensor:
        h = self.decoder.bert.encoder.layer[layer]
        own, out = h.attention.self, h.attention.output
        context = attend.self_attention(layer, own.query(hidden), own.key(hidden), own.value(hidden))
        hidden = out.LayerNorm(out.dense(context) + hidden)
        cross, out = h.crossattention.self, h.crossattention.output
        hidden = out.LayerNorm(out.dense(attend.cross_attention(layer, cross.query(hidden))) + hidden)
        inner = h.intermediate.intermediate_act_fn(h.intermediate.dense(hidden))
        return h.output.LayerNorm(h.output.dense(inner) + hidden)

    def logits(self, hidden: Tensor) -> Tensor:
        head = self.decoder.cls.predictions
        return head.decoder(head.transform(hidden))

    def scaling(self, layer: int, cross: bool) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def cross_projections(self, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        cross = self.decoder.bert.encoder.layer[layer].crossattention.self
        return cross.key.weight.T, cross.key.bias, cross.value.weight.T, cross.value.bias


def decoder_layers(decoder: nn.Module) -> DecoderLayers | None:
    """``decoder`` taken apart, or None for a decoder the kv step does not cover (module docstring)."""
    name = type(decoder).__name__
    config = getattr(decoder, "config", None)
    if name == "GPT2LMHeadModel" and getattr(config, "add_cross_attention", False):
        return Gpt2Layers(decoder)
    if name == "BlipTextLMHeadModel" and getattr(config, "position_embedding_type", "absolute") == "absolute":
        return BlipTextLayers(decoder)
    return None


__all__ = ["Attend", "BlipTextLayers", "DecoderLayers", "Gpt2Layers", "decoder_layers"]
