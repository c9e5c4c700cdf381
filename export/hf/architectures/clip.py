"""A transformers ``CLIPModel`` as a ranker of the model contract, version 2 (docs/architecture.md):
two graphs around the unchanged module.

- ``ImageEmbedding``: ``image`` uint8 [B, H, W, 3] at the image processor's size → ``embedding``
  float32 [B, J], L2-normalised (the vision tower's pooled output through the visual projection); the
  processor's rescale and mean/std run inside the graph, its resize and centre crop in the gateway.
- ``TextEmbedding``: ``tokens`` int64 [B, T] (BOS t1..tn EOS right-padded) and ``length`` int64 [B, 1]
  → ``embedding`` float32 [B, J], L2-normalised: the text tower's last hidden state at the EOS (the row's
  last real token, where CLIP pools) through the text projection. The cosine of the two is what CLIP
  scores an image–text pair by (its logit scale aside, which orders nothing)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from export.hf.architecture import AdaptedRanker, Architecture
from export.hf.pixels import ImageGraph
from export.hf.snapshot import Snapshot, SnapshotError, offline
from service.manifest import Preprocessing


class ImageEmbedding(ImageGraph):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.pixels(image)
        pooled = self.model.vision_model(pixel_values=x).pooler_output
        return nn.functional.normalize(self.model.visual_projection(pooled), dim=-1)


class TextEmbedding(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model: Any = model

    def forward(self, tokens: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        last = length[:, 0] - 1
        mask = (torch.arange(tokens.shape[1], device=tokens.device)[None, :] <= last[:, None]).to(torch.int64)
        hidden = self.model.text_model(input_ids=tokens, attention_mask=mask).last_hidden_state
        pooled = hidden[torch.arange(tokens.shape[0], device=tokens.device), last]
        return nn.functional.normalize(self.model.text_projection(pooled), dim=-1)


def adapt_ranker(snapshot: Snapshot, pre: Preprocessing) -> AdaptedRanker:
    """Load a CLIP snapshot offline and wrap it."""
    with offline():
        from transformers import CLIPModel

        model = CLIPModel.from_pretrained(str(snapshot.path), local_files_only=True).eval()
    text = model.config.text_config
    if text.bos_token_id is None or text.eos_token_id is None or text.bos_token_id == text.eos_token_id:
        raise SnapshotError(f"{snapshot.path}: the text config needs distinct bos_token_id and eos_token_id")
    pad = text.pad_token_id if text.pad_token_id is not None else text.eos_token_id
    return AdaptedRanker(
        model=model,
        image=ImageEmbedding(model, pre.rescale, pre.mean, pre.std),
        text=TextEmbedding(model),
        vocab_size=int(text.vocab_size),
        embedding_dim=int(model.config.projection_dim),
        bos=int(text.bos_token_id),
        eos=int(text.eos_token_id),
        pad=int(pad),
        max_tokens=int(text.max_position_embeddings),
    )


ARCHITECTURE = Architecture("clip", "ranker", "CLIPModel", adapt_ranker)

__all__ = ["ARCHITECTURE", "ImageEmbedding", "TextEmbedding", "adapt_ranker"]
