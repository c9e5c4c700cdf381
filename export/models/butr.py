"""BUTR (Nikolaus et al., 2019, §5): a language-encoding LSTM, top-down attention over the embedded regions, a
language-generation LSTM, and a ranking head sharing the language encoder. BUTD is the same model
trained with the ranking loss off.

Shapes: B images/captions, R regions, D region dim, J joint dim, L hidden, T tokens, V vocabulary.
State carried by the decoder step: [h_l, c_l, h_g, c_g] → S = 4L.
"""

from __future__ import annotations

from dataclasses import astuple

import torch
import torch.nn.functional as F
from torch import nn

from export.models.lstm_sizes import LSTMSizes
from export.models.step_contract import CaptionerStep, StepInputs, StepOutputs
from service.checks import above, within


class BUTR(CaptionerStep, nn.Module):
    def __init__(self, sizes: LSTMSizes, joint_dim: int) -> None:
        """``joint_dim``: J, the joint space of the embedded regions and the ranking head."""
        super().__init__()
        above(0, joint_dim=joint_dim)
        vocab_size, region_dim, word_dim, hidden_dim, attention_dim, dropout = astuple(sizes)
        self.hidden_dim = hidden_dim
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)  # W1
        self.language = nn.LSTM(word_dim, hidden_dim, batch_first=True)  # eq. 2
        self.text_project = nn.Linear(hidden_dim, joint_dim)  # W2
        self.region_project = nn.Linear(region_dim, joint_dim)  # W3
        self.region_weight = nn.Linear(joint_dim, 1)  # W4
        self.att_regions = nn.Linear(joint_dim, attention_dim)  # W6
        self.att_hidden = nn.Linear(hidden_dim, attention_dim)  # W7
        self.att_score = nn.Linear(attention_dim, 1)  # W5
        self.generation = nn.LSTM(joint_dim + hidden_dim, hidden_dim, batch_first=True)  # eq. 11
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden_dim, vocab_size)  # W8

    @property
    def state_dim(self) -> int:
        return 4 * self.hidden_dim

    # --- shared pieces -------------------------------------------------------------------------
    def memory(self, regions: torch.Tensor) -> torch.Tensor:
        """[B, R, D] → embedded regions v^e [B, R, J] (eq. 4)."""
        return self.region_project(regions)

    def attend(
        self, keys: torch.Tensor, memory: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """keys [B, R, A], memory [B, R, J], hidden [B, T, L] → (v̂ [B, T, J], α [B, T, R]) (eqs. 8–10)."""
        scores = self.att_score(torch.tanh(keys.unsqueeze(1) + self.att_hidden(hidden).unsqueeze(2))).squeeze(
            -1
        )
        alpha = torch.softmax(scores, dim=-1)
        return torch.bmm(alpha, memory), alpha

    # --- ranking head --------------------------------------------------------------------------
    def image_embedding(self, regions: torch.Tensor) -> torch.Tensor:
        """[B, R, D] → v* [B, J], L2-normalised (eqs. 4–7)."""
        ve = self.memory(regions)
        beta = torch.softmax(self.region_weight(ve), dim=1)
        return F.normalize((beta * ve).sum(1), dim=-1)

    def text_embedding(self, tokens: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] = BOS w1..wn PAD..., length [B] or [B, 1] = n+1 → s* [B, J], L2-normalised (eq 3)."""
        hidden, _ = self.language(self.embed(tokens))
        index = (length.reshape(-1) - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, hidden.size(-1))
        last = hidden.gather(1, index).squeeze(1)
        return F.normalize(self.text_project(last), dim=-1)

    # --- captioning ----------------------------------------------------------------------------
    def forward(self, regions: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: regions [B, R, D], tokens [B, T] (BOS w1..wn EOS PAD) → logprobs [B, T-1, V]
        predicting tokens[:, 1:]. The attention depends only on the language encoder, so every step
        runs at once."""
        memory = self.memory(regions)
        hidden_l, _ = self.language(self.embed(tokens[:, :-1]))
        context, _ = self.attend(self.att_regions(memory), memory, hidden_l)
        hidden_g, _ = self.generation(torch.cat([context, hidden_l], dim=-1))
        return F.log_softmax(self.output(self.dropout(hidden_g)), dim=-1)

    def init(self, regions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Contract `<cap>_init`: regions [B, R, D] → memory [B, R, J], zero state [B, 4L]."""
        memory = self.memory(regions)
        state = memory.new_zeros(memory.size(0), self.state_dim) + 0.0 * memory.sum(dim=(1, 2)).unsqueeze(1)
        return memory, state

    def decode_step(self, inputs: StepInputs) -> StepOutputs:
        """Contract `<cap>_step` (``export.models.step_contract``), memory [I, M, J], state [N, 4L]: reads
        only the last real token."""
        memory, image_index, tokens, length, state = inputs
        hl, cl, hg, cg = state.chunk(4, dim=-1)
        last = tokens.gather(1, (length - 1).clamp(min=0).unsqueeze(1))  # [N, 1]
        out_l, (hl2, cl2) = self.language(self.embed(last), (hl.unsqueeze(0), cl.unsqueeze(0)))
        keys = self.att_regions(memory)[image_index]  # projected once per image, then gathered
        context, alpha = self.attend(keys, memory[image_index], out_l)
        out_g, (hg2, cg2) = self.generation(
            torch.cat([context, out_l], dim=-1), (hg.unsqueeze(0), cg.unsqueeze(0))
        )
        logprobs = F.log_softmax(self.output(out_g.squeeze(1)), dim=-1)
        state_out = torch.cat([hl2[0], cl2[0], hg2[0], cg2[0]], dim=-1)
        return logprobs, state_out, alpha.squeeze(1)


def not_negatives(image_ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[B, B] bool: pairs that must not count as negatives of each other — the same image, or captions with
    identical tokens (word-for-word duplicates from different images cannot be told apart by any ranker)."""
    same_image = image_ids.unsqueeze(0) == image_ids.unsqueeze(1)
    same_text = (tokens.unsqueeze(0) == tokens.unsqueeze(1)).all(-1)
    return same_image | same_text


def ranking_loss(
    images: torch.Tensor, texts: torch.Tensor, excluded: torch.Tensor, margin: float, hardest: float = 1.0
) -> torch.Tensor:
    """VSE++ hinge loss (Nikolaus et al., 2019, eq. 14). images, texts [B, J] L2-normalised; excluded [B, B]
    bool marks pairs that are not negatives (``not_negatives``). ``hardest`` in [0, 1] weighs the hardest
    negative per row (VSE++, 1.0) against the mean violation (VSE0, 0.0); VSE0 first and a share of it
    afterwards keep max-violation training from collapsing to equal scores when many captions fit many
    images."""
    scores = images @ texts.t()  # [B, B]
    positive = scores.diag().unsqueeze(1)
    cost_text = (margin + scores - positive).clamp(min=0).masked_fill(excluded, 0)
    cost_image = (margin + scores - positive.t()).clamp(min=0).masked_fill(excluded, 0)
    within(0, 1, hardest=hardest)
    max_violation = (cost_text.max(dim=1).values + cost_image.max(dim=0).values).mean()
    mean_violation = (cost_text.sum() + cost_image.sum()) / (~excluded).sum().clamp(min=1)
    return hardest * max_violation + (1.0 - hardest) * mean_violation
