"""The separable Gaussian blur of :class:`chute.image.augment.GaussianBlur` on a uint8 batch:
a few samples at a time through float32 buffers allocated once per call, each sample with
only the taps that can move its result (the outer taps of a small sigma are below 1/20 of a
level together), reflect padding as torchvision's ``gaussian_blur``."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["blur", "gaussian_taps"]

_BLOCK = 1 << 18
"""Pixels (per channel) of the samples blurred at a time: large enough that each torch op
does real work, small enough that a block's buffers stay near the cache."""

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
    """Blur samples ``rows`` of the uint8 batch ``out`` (B, C, H, W) in place, sample
    ``rows[i]`` with the symmetric kernel ``taps[i]`` (odd length, radius < H and W)."""
    radius = _radius(taps)
    centre = taps.shape[1] // 2
    pixels = out.numpy()
    _, c, h, w = out.shape
    per = max(1, _BLOCK // (h * w))
    for r in np.unique(radius).tolist():
        if r == 0:
            continue  # the centre tap alone: within 1/20 of a level of the sample itself
        group = np.flatnonzero(radius == r)
        k = min(per, len(group))
        padded = torch.empty((k, c, h, w + 2 * r))  # the sample, reflected left and right
        across = torch.empty((k, c, h + 2 * r, w))  # blurred along rows, reflected up and down
        both = torch.empty((k, c, h, w))
        wt = torch.from_numpy(taps[:, centre - r : centre + r + 1]).reshape(-1, 1, 1, 1, 2 * r + 1)
        for a in range(0, len(group), per):
            sel = rows[group[a : a + per]]
            n = len(sel)
            x, y, z, kw = padded[:n], across[:n], both[:n], wt[group[a : a + per]]
            x[..., r : r + w].copy_(torch.from_numpy(pixels[sel]))
            for j in range(r):  # x[-1 - j] and x[w + j] mirror x[1 + j] and x[w - 2 - j]
                x[..., r - 1 - j].copy_(x[..., r + 1 + j])
                x[..., r + w + j].copy_(x[..., r + w - 2 - j])
            mid = y[..., r : r + h, :]
            torch.mul(x[..., r : r + w], kw[..., r], out=mid)
            for j in range(2 * r + 1):
                if j != r:
                    mid.addcmul_(x[..., j : j + w], kw[..., j])
            for j in range(r):
                y[..., r - 1 - j, :].copy_(y[..., r + 1 + j, :])
                y[..., r + h + j, :].copy_(y[..., r + h - 2 - j, :])
            torch.mul(mid, kw[..., r], out=z)
            for j in range(2 * r + 1):
                if j != r:
                    z.addcmul_(y[..., j : j + h, :], kw[..., j])
            # in [0, 255] (a positive kernel summing to at most 1): + 0.5 and numpy's
            # truncating cast round half up
            z.add_(0.5)
            pixels[sel] = z.numpy().astype(np.uint8)
