"""The contract's step (``memory`` [I, M, D], ``image_index`` [N], right-padded ``tokens`` [N, T],
``length`` [N], ``state`` [N, 1] → ``logprobs`` [N, V], ``state_out``, ``attention`` [N, M]) of an
encoder–decoder captioner whose text decoder cross-attends to the image (ViT + GPT-2's ``decoder``,
BLIP's ``text_decoder``): the decoder runs on each row's prefix with its image's states (every image
position visible, as generate()'s all-ones mask), the next-token log-probs are read after the row's
last real token, and ``attention`` is the last layer's cross-attention from that position averaged over
its heads (the layer closest to the words, as seed 002 reads attention; no head singled out)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class CrossAttentionStep(nn.Module):
    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.decoder: Any = decoder

    def forward(
        self,
        memory: torch.Tensor,
        image_index: torch.Tensor,
        tokens: torch.Tensor,
        length: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        encoder_states = memory.index_select(0, image_index)
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        mask = (positions < length.unsqueeze(1)).to(torch.int64)
        out = self.decoder(
            input_ids=tokens,
            attention_mask=mask,
            encoder_hidden_states=encoder_states,
            output_attentions=True,
            use_cache=False,
        )
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        last = length - 1
        logprobs = torch.log_softmax(out.logits[rows, last].to(torch.float32), dim=-1)
        attention = out.cross_attentions[-1][rows, :, last].mean(dim=1)
        return logprobs, state, attention


__all__ = ["CrossAttentionStep"]
