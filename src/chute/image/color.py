"""Colour maths on float RGB batches in [0, 255], shared by the augmentations: the luma
(ITU-R 601-2 weights, torchvision's ``rgb_to_grayscale``) and the hue rotation."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["GRAY", "gray", "mean_gray", "shift_hue"]

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


def shift_hue(x: torch.Tensor, shift: np.ndarray) -> torch.Tensor:
    """Rotate the hue of float RGB ``x`` in [0, 255] by ``shift`` turns (B, 1, 1, 1), in
    place: torchvision's HSV round trip written as ``channel = max - chroma * clamp(d - 1, 0,
    1)``, ``d`` the distance (in sixths of a turn, around the circle) from the new hue to the
    channel's own (R 0, G 2, B 4); value and chroma are kept. In numpy ufuncs on the tensor's
    memory: numpy's comparisons are several times faster than torch's on CPU."""
    a = x.numpy()
    r, g, b = a[:, 0:1], a[:, 1:2], a[:, 2:3]
    v = np.maximum(np.maximum(r, g), b)
    cr = np.minimum(np.minimum(r, g), b)
    np.subtract(v, cr, out=cr)
    inv = np.reciprocal(np.maximum(cr, 1e-6))
    # hue in sixths, in [-1, 5): blue's formula, then green's and red's blended in where the
    # channel is the max (red wins ties, then green, as torchvision); blends, not masked
    # copies: those stall on the unpredictable masks of a photo
    h = np.subtract(r, g)
    h *= inv
    h += 4.0
    t, is_max = np.empty_like(h), np.empty_like(h)
    for c, (p, q), base in ((g, (b, r), 2.0), (r, (g, b), 0.0)):
        np.subtract(p, q, out=t)
        t *= inv
        t += base - h
        np.equal(v, c, out=is_max, casting="unsafe")
        t *= is_max
        h += t
    h += (6.0 * shift).astype(np.float32)  # now in [-4, 8) (|shift| <= 0.5)
    for c, centre in ((r, 0.0), (g, 2.0), (b, 4.0)):
        d = np.abs(np.subtract(h, centre, out=inv), out=inv)  # in [0, 12): around the
        np.minimum(d, np.abs(np.subtract(d, 6.0, out=t), out=t), out=t)  # circle, the least
        np.minimum(np.subtract(12.0, d, out=d), t, out=t)  # of d, |d - 6| and 12 - d
        t -= 1.0
        np.clip(t, 0.0, 1.0, out=t)
        t *= cr
        np.subtract(v, t, out=c)
    return x
