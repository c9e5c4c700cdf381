"""What every imported image graph opens with: uint8 images [B, H, W, 3] → float32 pixel values
[B, 3, H, W] rescaled and normalised as the snapshot's image processor does (its resize and crop are
the gateway's, ``service.engine.runner.prepare_images``); ``ImageGraph``, such a graph around a
transformers module, and ``CaptionerEncoder``, a captioner's encoder graph (``memory`` and an unused
``state``), of which each architecture says only how pixel values become its memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


class ImageGraph(nn.Module):
    """A graph that reads uint8 images: the transformers ``model`` and the ``PixelValues`` it opens with."""

    def __init__(self, model: nn.Module, rescale: float, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.model: Any = model
        self.pixels = PixelValues(rescale, mean, std)


class CaptionerEncoder(ImageGraph):
    """uint8 images → ``memory`` [B, M, D] (``memory`` of the pixel values, the architecture's) and
    ``state`` zeros [B, 1] (unused: the decoder reads the whole prefix)."""

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        memory = self.memory(self.pixels(image))
        return memory, torch.zeros(memory.shape[0], 1, dtype=torch.float32)

    def memory(self, pixel_values: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


__all__ = ["CaptionerEncoder", "ImageGraph", "PixelValues"]
