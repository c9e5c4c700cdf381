"""What every imported image graph opens with: uint8 images [B, H, W, 3] → float32 pixel values
[B, 3, H, W] rescaled and normalised as the snapshot's image processor does (its resize and crop are
the gateway's, ``service.engine.runner.prepare_images``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class PixelValues(nn.Module):
    def __init__(self, rescale: float, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.rescale = float(rescale)
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).to(torch.float32) * self.rescale
        return (x - self.get_buffer("mean")) / self.get_buffer("std")


__all__ = ["PixelValues"]
