"""Device-side normalization of decoded image batches: ``chute.normalize``.

The loaders hand out images as uint8 ``(B, 3, H, W)`` (4x less to copy to the GPU than
float32); converting and normalizing is then one fused pass on the device, after
``chute.to_device``, instead of a float batch built on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import ArgumentError

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "normalize"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalize(
    images: torch.Tensor,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    *,
    channels_last: bool = False,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``(images / 255 - mean) / std`` per channel, as ``dtype``, on ``images``' device.

    ``images``: uint8 ``(B, C, H, W)`` (as ``decode=`` makes them); ``mean`` and ``std`` in
    units of the [0, 1] range, torchvision's convention (ImageNet's by default).
    ``channels_last`` returns the result in ``torch.channels_last`` memory format (faster
    convolutions with AMP on recent GPUs); the shape stays ``(B, C, H, W)``.
    """
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.dtype != torch.uint8:
        got = (
            f"{images.dtype} {tuple(images.shape)}"
            if isinstance(images, torch.Tensor)
            else type(images).__name__
        )
        raise ArgumentError(f"normalize takes a uint8 (B, C, H, W) tensor, got {got}")
    if not dtype.is_floating_point:
        raise ArgumentError(f"normalize: dtype must be a floating point dtype, got {dtype}")
    c = images.shape[1]
    if len(mean) != c or len(std) != c or any(s == 0 for s in std):
        raise ArgumentError(
            f"normalize: mean and std need {c} values (std non-zero), got {mean!r}, {std!r}"
        )
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    # Computed in float32 (half precision would round the scale), then cast once.
    m = torch.tensor(mean, dtype=torch.float32, device=images.device).view(1, c, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=images.device).view(1, c, 1, 1)
    scale = 1.0 / (255.0 * s)
    out = images.to(torch.float32, memory_format=fmt).mul_(scale).sub_(m / s)
    return out if dtype == torch.float32 else out.to(dtype)
