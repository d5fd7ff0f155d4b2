"""The Gaussian kernels of :class:`chute.image.augment.GaussianBlur`: torchvision's
normalised taps, each sample blurred with only the taps that can move its result (the outer
taps of a small sigma are below 1/20 of a level together), by the compiled separable blur of
:mod:`chute.image.kernels.blur`."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentValueError
from .checks import check_batch, check_rows
from .kernels import load

__all__ = ["blur", "gaussian_taps"]

_NEGLIGIBLE = 0.05 / 255
"""Weight of the outer taps left out together: at most 1/20 of a level on the result."""


def gaussian_taps(kernel_size: int, sigma: np.ndarray) -> np.ndarray:
    """``(len(sigma), kernel_size)`` float32: torchvision's normalised Gaussian kernels."""
    r = kernel_size // 2
    ker = np.exp(-0.5 * ((np.arange(kernel_size) - r)[None, :] / sigma[:, None]) ** 2)
    return (ker / ker.sum(1, keepdims=True)).astype(np.float32)


def _radius(taps: np.ndarray) -> np.ndarray:
    """Per kernel, the fewest taps either side whose left-out outer weight is negligible."""
    r = taps.shape[1] // 2
    outer = taps[:, : r + 1][:, ::-1]  # by distance from the centre: 0 .. r
    beyond = 2 * (np.cumsum(outer[:, ::-1], axis=1)[:, ::-1] - outer)  # weight past each
    return np.argmax(beyond <= _NEGLIGIBLE, axis=1)


def blur(out: torch.Tensor, rows: np.ndarray, taps: np.ndarray) -> None:
    """Blur samples ``rows`` of the contiguous uint8 batch ``out`` (B, C, H, W) in place,
    sample ``rows[i]`` with the symmetric kernel ``taps[i]`` (float32, odd length, radius < H
    and W)."""
    check_batch("blur", out, None)
    rows = check_rows("blur", rows, len(out))
    h, w = out.shape[-2:]
    if not isinstance(taps, np.ndarray) or taps.dtype != np.float32:
        got = taps.dtype if isinstance(taps, np.ndarray) else type(taps).__name__
        raise ArgumentError(f"blur: taps must be a float32 numpy array, got {got}")
    k = taps.shape[1] if taps.ndim == 2 else 0
    if taps.shape != (len(rows), k) or k % 2 == 0 or k // 2 >= min(h, w):
        raise ArgumentValueError(
            f"blur: taps must be one odd-length kernel per row, radius below the image's "
            f"height and width ({h}, {w}): shape ({len(rows)}, odd k <= {2 * min(h, w) - 1}), "
            f"got {taps.shape}"
        )
    if len(rows):
        load("blur").separable(out.numpy(), rows, taps, _radius(taps))
