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
    place, as torchvision's HSV round trip (within one level
    of the float round trip).

    Value ``v`` and chroma ``c`` are kept; each channel becomes ``v - c * clamp(d - 1, 0, 1)``,
    ``d`` the distance (in sixths of a turn, around the circle) from the new hue to the
    channel's own. Written in int16 on eighths of a level: ``x`` rounded to them, then ``c *
    (hue + 1)`` (no division) and the shift, rounded to one; an int16 pass moves half the
    bytes of a float32 one."""
    a = x.numpy()
    a *= 8.0
    a += 0.5  # a >= 0: the cast below rounds half up, to eighths of a level
    q = np.empty((3, len(a), 1, *a.shape[2:]), np.int16)
    for i in range(3):
        np.copyto(q[i], a[:, i : i + 1], casting="unsafe")
    r, g, b = q
    v, c = np.maximum(np.maximum(r, g), b), np.minimum(np.minimum(r, g), b)
    np.subtract(v, c, out=c)
    # c * (hue + 1) in [0, 6c): blue's formula, green's where green is the max, red's where red
    # is (red wins ties, then green, as torchvision)
    h, t = np.subtract(r, g), np.subtract(b, r)
    h += 5 * c
    t += 3 * c
    np.copyto(h, t, where=v == g)
    np.subtract(g, b, out=t)
    t += c
    np.copyto(h, t, where=v == r)
    # + c s, s the shift in sixths taken into [0, 6): h in [0, 12c), 12 * 8 * 255 < 2**15
    cs = np.multiply(c, (6 * shift % 6).astype(np.float32))
    np.add(h, np.rint(cs, out=cs), out=h, casting="unsafe")
    h -= (h >= 6 * c) * (6 * c)  # around the circle, into [0, 6c)
    # d = 3 - e / c, e = ||h - c centre| - 3c|, centres 1, 3, 5 (R, G, B): clamp(d - 1, 0,
    # 1) = 2 - clamp(e / c, 1, 2), so the channel is v - 2c + clamp(e, c, 2c)
    base = v - 2 * c + 4  # + 4: rounded half up to whole levels
    e = np.empty_like(h)
    for i, centre in enumerate((1, 3, 5)):
        np.abs(np.subtract(h, centre * c, out=e), out=e)
        np.abs(np.subtract(e, 3 * c, out=e), out=e)
        np.minimum(np.maximum(e, c, out=e), 2 * c, out=e)
        e += base
        e >>= 3
        np.copyto(a[:, i : i + 1], e)
    return x
