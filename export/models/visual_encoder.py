"""The shared visual encoder: a small CNN over a uint8 image giving grid region features, trained with
per-cell auxiliary supervision from SceneWorld's scene graphs (noun, colour, size, action) — the
stand-in for the bottom-up region features of Nikolaus et al. (2019)."""

from __future__ import annotations

import torch
from torch import nn

MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
    )


class VisualEncoder(nn.Module):
    """``image`` uint8 [B, H, W, 3] → ``regions`` float32 [B, grid*grid, region_dim]."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, channels: tuple[int, int, int], region_dim: int, grid: int, image_size: int) -> None:
        super().__init__()
        if image_size % (8 * grid) != 0:
            raise ValueError(f"image_size {image_size} must be a multiple of 8*grid={8 * grid}")
        c1, c2, c3 = channels
        self.grid = grid
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1) * 255.0)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1) * 255.0)
        self.features = nn.Sequential(
            _block(3, c1, 2),
            _block(c1, c2, 2),
            _block(c2, c2, 1),
            _block(c2, c3, 2),
            _block(c3, c3, 1),
            _block(c3, c3, 1),
        )
        self.pool = nn.AdaptiveAvgPool2d(grid)
        self.project = nn.Conv2d(c3, region_dim, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).float()
        x = (x - self.mean) / self.std
        x = self.project(self.pool(self.features(x)))  # [B, D, g, g]
        return torch.relu(x).flatten(2).transpose(1, 2).contiguous()  # [B, g*g, D]


class CellHeads(nn.Module):
    """Auxiliary per-region classifiers used only while training the encoder."""

    def __init__(self, region_dim: int, label_sizes: dict[str, int]) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({name: nn.Linear(region_dim, n) for name, n in label_sizes.items()})

    def forward(self, regions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: head(regions) for name, head in self.heads.items()}
