"""VSE++ image–sentence ranker (Faghri et al. 2018): regions → joint space, GRU text encoder → joint space,
trained with the hardest-negative hinge loss (``export.models.butr.ranking_loss``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from service.checks import above


class VSEPP(nn.Module):
    def __init__(
        self, vocab_size: int, region_dim: int, word_dim: int, hidden_dim: int, joint_dim: int
    ) -> None:
        super().__init__()
        above(0, vocab_size=vocab_size, region_dim=region_dim, joint_dim=joint_dim)
        self.image_project = nn.Sequential(
            nn.Linear(2 * region_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, joint_dim)
        )
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.text = nn.GRU(word_dim, hidden_dim, batch_first=True)
        self.text_project = nn.Linear(hidden_dim, joint_dim)

    def image_embedding(self, regions: torch.Tensor) -> torch.Tensor:
        """regions [B, R, D] → [B, J] (mean- and max-pooled regions, an MLP, L2-normalised)."""
        pooled = torch.cat([regions.mean(1), regions.amax(1)], dim=-1)
        return F.normalize(self.image_project(pooled), dim=-1)

    def text_embedding(self, tokens: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] = BOS w1..wn PAD..., length [B] or [B, 1] = n+1 → [B, J], L2-normalised."""
        hidden, _ = self.text(self.embed(tokens))
        index = (length.reshape(-1) - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, hidden.size(-1))
        return F.normalize(self.text_project(hidden.gather(1, index).squeeze(1)), dim=-1)
