"""Show, Attend and Tell (Nikolaus et al., 2019, §4.1): one LSTM with soft attention over the regions, a
gating scalar on the context, and an initial state from the mean region. State carried by the step:
[h, c] → S = 2L.
Shapes: B batch, R regions, D region dim, A attention dim, L hidden, T tokens, V vocabulary."""

from __future__ import annotations

from dataclasses import astuple

import torch
import torch.nn.functional as F
from torch import nn

from export.models.lstm_sizes import LSTMSizes
from export.models.step_contract import CaptionerStep, StepInputs, StepOutputs


class SAT(CaptionerStep, nn.Module):
    def __init__(self, sizes: LSTMSizes) -> None:
        super().__init__()
        vocab_size, region_dim, word_dim, hidden_dim, attention_dim, dropout = astuple(sizes)
        self.hidden_dim = hidden_dim
        self.init_h = nn.Linear(region_dim, hidden_dim)
        self.init_c = nn.Linear(region_dim, hidden_dim)
        self.att_regions = nn.Linear(region_dim, attention_dim)
        self.att_hidden = nn.Linear(hidden_dim, attention_dim)
        self.att_score = nn.Linear(attention_dim, 1)
        self.gate = nn.Linear(hidden_dim, region_dim)
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.cell = nn.LSTMCell(word_dim + region_dim, hidden_dim)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden_dim, vocab_size)

    @property
    def state_dim(self) -> int:
        return 2 * self.hidden_dim

    def init(self, regions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Contract `<cap>_init`: memory = the regions [B, R, D]; state [B, 2L] from the mean region."""
        mean = regions.mean(1)
        return regions, torch.cat([torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean))], dim=-1)

    def _cell(
        self, keys: torch.Tensor, memory: torch.Tensor, word: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step: keys [N, R, A], memory [N, R, D], word [N] → (logits [N, V], h, c, α [N, R])."""
        scores = self.att_score(torch.tanh(keys + self.att_hidden(h).unsqueeze(1))).squeeze(-1)
        alpha = torch.softmax(scores, dim=-1)
        context = torch.sigmoid(self.gate(h)) * (alpha.unsqueeze(-1) * memory).sum(1)
        h, c = self.cell(torch.cat([self.embed(word), context], dim=-1), (h, c))
        return self.output(self.dropout(h)), h, c, alpha

    def forward(self, regions: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tokens [B, T] (BOS w1..wn EOS PAD) → logprobs [B, T-1, V] for tokens[:, 1:]."""
        memory, state = self.init(regions)
        h, c = state.chunk(2, dim=-1)
        keys = self.att_regions(memory)
        logits = []
        for t in range(tokens.size(1) - 1):
            out, h, c, _ = self._cell(keys, memory, tokens[:, t], h, c)
            logits.append(out)
        return F.log_softmax(torch.stack(logits, dim=1), dim=-1)

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        """Contract `<cap>_step` (``export.models.step_contract``), memory [I, R, D], state [N, 2L]: reads
        only the last real token."""
        memory, image_index, tokens, length, state = inputs
        h, c = state.chunk(2, dim=-1)
        last = tokens.gather(1, (length - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        keys = self.att_regions(memory)[image_index]
        out, h, c, alpha = self._cell(keys, memory[image_index], last, h, c)
        return F.log_softmax(out, dim=-1), torch.cat([h, c], dim=-1), alpha
