"""Fully-attentive captioners (Cornia et al., 2022, §3.3–3.4): a 3-layer Transformer encoder over the regions
and a 3-layer decoder; the M2 variant adds learnable memory slots to the encoder's self-attention keys/values
(eq. 7) and a meshed decoder whose cross-attention reads every encoder layer through sigmoid gates (eqs. 8–9).

Contract (docs/architecture.md): ``init`` gives memory [B, M, d] — the last encoder layer
(Transformer, M = R) or all
N encoder layers stacked along M (M2, M = N·R) — and an unused state [B, 1]; ``step`` reads the whole
right-padded prefix. Shapes: B batch, R regions, D region dim, T tokens, V vocabulary, d model dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from export.models.step_contract import CaptionerStep, StepInputs, StepOutputs
from service.checks import above, at_least


class Attention(nn.Module):
    """Multi-head scaled dot-product attention, optionally with ``slots`` learnable memory keys/values
    per head appended to the keys and values (memory-augmented attention)."""

    def __init__(self, dim: int, heads: int, slots: int = 0, dropout: float = 0.1) -> None:
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"dim {dim} must be divisible by heads {heads}")
        self.heads, self.head_dim, self.slots = heads, dim // heads, slots
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))
        if slots:
            self.memory_key = nn.Parameter(
                torch.randn(1, heads, slots, self.head_dim) / math.sqrt(self.head_dim)
            )
            self.memory_value = nn.Parameter(torch.randn(1, heads, slots, self.head_dim) / math.sqrt(slots))
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(0), x.size(1), self.heads, self.head_dim).transpose(1, 2)  # [B, h, L, dh]

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, blocked: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [B, Tq, d], keys [B, Tk, d], blocked [Tq, Tk] bool (True = may not attend) →
        (out [B, Tq, d], weights over the Tk real keys averaged over heads [B, Tq, Tk])."""
        q, k, v = self._split(self.query(query)), self._split(self.key(keys)), self._split(self.value(keys))
        if self.slots:
            batch = q.size(0)
            k = torch.cat([k, self.memory_key.expand(batch, -1, -1, -1) * math.sqrt(self.head_dim)], dim=2)
            v = torch.cat([v, self.memory_value.expand(batch, -1, -1, -1) * math.sqrt(self.slots)], dim=2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B, h, Tq, Tk(+slots)]
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(query.shape)
        return self.out(out), weights[..., : keys.size(1)].mean(1)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, dim)
        )
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.net(x))


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, slots: int) -> None:
        super().__init__()
        self.attention = Attention(dim, heads, slots)
        self.norm = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, 2 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(self.norm(x + self.attention(x, x)[0]))


class DecoderLayer(nn.Module):
    """Masked self-attention, then cross-attention to the last encoder layer (standard) or to every
    encoder layer with sigmoid gates α_i = σ(W_i [Y, C_i] + b_i) (meshed)."""

    def __init__(self, dim: int, heads: int, encoder_layers: int, meshed: bool) -> None:
        super().__init__()
        self.meshed = meshed
        self.self_attention = Attention(dim, heads)
        self.norm_self = nn.LayerNorm(dim)
        crosses = encoder_layers if meshed else 1
        self.cross = nn.ModuleList(Attention(dim, heads) for _ in range(crosses))
        self.gates = nn.ModuleList(nn.Linear(2 * dim, dim) for _ in range(crosses if meshed else 0))
        self.norm_cross = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, 2 * dim)

    def forward(
        self, y: torch.Tensor, encoded: list[torch.Tensor], causal: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """y [B, T, d]; encoded: per encoder layer [B, R, d] → (y [B, T, d], cross weights [B, T, M])."""
        y = self.norm_self(y + self.self_attention(y, y, causal)[0])
        if self.meshed:
            parts = [cross(y, layer) for cross, layer in zip(self.cross, encoded, strict=True)]
            gated = [
                torch.sigmoid(gate(torch.cat([y, c], dim=-1))) * c
                for gate, (c, _) in zip(self.gates, parts, strict=True)
            ]
            context = torch.stack(gated).sum(0) / math.sqrt(len(gated))
            weights = torch.cat([w for _, w in parts], dim=-1) / len(parts)  # [B, T, N·R]
        else:
            context, weights = self.cross[0](y, encoded[-1])
        return self.ff(self.norm_cross(y + context)), weights


class TransformerCaptioner(CaptionerStep, nn.Module):
    def __init__(
        self,
        vocab_size: int,
        region_dim: int,
        regions: int,
        dim: int = 192,
        heads: int = 4,
        layers: int = 3,
        memory_slots: int = 0,
        meshed: bool = False,
        max_tokens: int = 40,
    ) -> None:
        super().__init__()
        above(0, vocab_size=vocab_size, region_dim=region_dim, regions=regions)
        above(0, dim=dim, layers=layers, max_tokens=max_tokens)
        at_least(0, memory_slots=memory_slots)
        self.layers, self.regions, self.meshed, self.max_tokens = layers, regions, meshed, max_tokens
        self.region_in = nn.Sequential(
            nn.Linear(region_dim, dim), nn.ReLU(), nn.Dropout(0.1), nn.LayerNorm(dim)
        )
        self.region_position = nn.Parameter(torch.zeros(1, regions, dim))
        self.encoder = nn.ModuleList(EncoderLayer(dim, heads, memory_slots) for _ in range(layers))
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.register_buffer("positions", _sinusoid(max_tokens, dim), persistent=False)
        self.decoder = nn.ModuleList(DecoderLayer(dim, heads, layers, meshed) for _ in range(layers))
        self.output = nn.Linear(dim, vocab_size)

    positions: torch.Tensor
    state_dim = 1

    def encode(self, regions: torch.Tensor) -> list[torch.Tensor]:
        """regions [B, R, D] → every encoder layer's output, each [B, R, d]."""
        x = self.region_in(regions) + self.region_position
        outputs = []
        for layer in self.encoder:
            x = layer(x)
            outputs.append(x)
        return outputs

    def decode(self, encoded: list[torch.Tensor], tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, T] → (logprobs [B, T, V], cross-attention weights averaged over layers [B, T, M])."""
        t = tokens.size(1)
        y = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.positions[:t]
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        weights = []
        for layer in self.decoder:
            y, w = layer(y, encoded, causal)
            weights.append(w)
        return F.log_softmax(self.output(y), dim=-1), torch.stack(weights).mean(0)

    def forward(self, regions: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tokens [B, T] (BOS w1..wn EOS PAD) → logprobs [B, T-1, V] for tokens[:, 1:]."""
        return self.decode(self.encode(regions), tokens[:, :-1])[0]

    def init(self, regions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Contract `<cap>_init`: memory [B, M, d] (M = R, or N·R for the meshed decoder), state [B, 1]."""
        encoded = self.encode(regions)
        memory = torch.cat(encoded, dim=1) if self.meshed else encoded[-1]
        return memory, memory[:, :1, 0] * 0.0

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        """Contract `<cap>_step` (``export.models.step_contract``), memory [I, M, d]: reads the whole
        prefix; ``state`` [N, 1] is unused and passed through."""
        memory, image_index, tokens, length, state = inputs
        rows = memory[image_index]
        encoded = list(rows.chunk(self.layers, dim=1)) if self.meshed else [rows]
        logprobs, weights = self.decode(encoded, tokens)
        last = (length - 1).clamp(min=0)
        pick = last.view(-1, 1, 1)
        return (
            logprobs.gather(1, pick.expand(-1, 1, logprobs.size(-1))).squeeze(1),
            state,
            weights.gather(1, pick.expand(-1, 1, weights.size(-1))).squeeze(1),
        )


def _sinusoid(length: int, dim: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    scale = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * scale)
    table[:, 1::2] = torch.cos(position * scale)
    return table
