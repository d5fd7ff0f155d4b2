"""The luma (ITU-R 601-2 weights, torchvision's ``rgb_to_grayscale``) of float RGB batches in
[0, 255], shared by the colour augmentations."""

from __future__ import annotations

import torch

__all__ = ["GRAY", "gray", "mean_gray"]

GRAY = (0.2989, 0.587, 0.114)


def gray(x: torch.Tensor) -> torch.Tensor:
    """The luma of float RGB ``(B, 3, H, W)`` as ``(B, 1, H, W)`` (a new tensor; in [0, 255]
    without a clamp: the weights sum to 0.9999)."""
    g = x[:, 0:1] * GRAY[0]
    g.add_(x[:, 1:2], alpha=GRAY[1]).add_(x[:, 2:3], alpha=GRAY[2])
    return g


def mean_gray(x: torch.Tensor) -> torch.Tensor:
    """Each sample's mean luma, ``(B, 1, 1, 1)``: the luma of the channel means (linear)."""
    return (x.mean(dim=(2, 3)) @ torch.tensor(GRAY)).reshape(-1, 1, 1, 1)
