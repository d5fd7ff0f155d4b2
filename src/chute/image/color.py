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


_HUE_BLOCK = 1 << 17
"""Pixels of the samples whose hue turns at a time: the int16 planes of a block (256 KB
each) stay in cache and are reused, no page of a fresh temporary is touched per pass."""


def shift_hue(x: torch.Tensor, shift: np.ndarray) -> torch.Tensor:
    """Rotate the hue of RGB ``x`` (B, 3, H, W) by ``shift`` turns (B, 1, 1, 1) in place, as
    torchvision's HSV round trip: ``x`` uint8, or float in [0, 255] (rounded to whole levels,
    within one of the float round trip).

    Value ``v`` and chroma ``c`` are kept; each channel becomes ``v - c * clamp(d - 1, 0, 1)``,
    ``d`` the distance (in sixths of a turn, around the circle) from the new hue to the
    channel's own. Written in int16 on eighths of a level: ``x`` rounded to them, then ``c *
    (hue + 1)`` (no division) and the shift, rounded to one; an int16 pass moves half the
    bytes of a float32 one, and uint8 ``x`` needs no float pass at all. A few samples at a
    time, in buffers allocated once per call."""
    a = x.numpy()
    n, _, hh, ww = a.shape
    per = max(1, _HUE_BLOCK // (hh * ww))
    k = min(per, n)
    q = np.empty((11, k, 1, hh, ww), np.int16)
    mask = np.empty((k, 1, hh, ww), np.bool_)
    cs = np.empty((k, 1, hh, ww), np.float32)
    turn = (6 * np.asarray(shift, np.float64) % 6).astype(np.float32).reshape(-1, 1, 1, 1)
    for s in range(0, n, per):
        m = min(per, n - s)
        block, rgb = a[s : s + m], q[:3, :m]
        planes = np.moveaxis(block, 1, 0)[:, :, None]  # (3, m, 1, H, W), as rgb
        if a.dtype == np.uint8:
            np.multiply(planes, np.int16(8), out=rgb)
        else:
            block *= 8.0
            block += 0.5  # block >= 0: the cast rounds half up, to eighths of a level
            np.copyto(rgb, planes, casting="unsafe")
        _turn(q[:, :m], turn[s : s + m], mask[:m], cs[:m])
        np.copyto(planes, rgb, casting="unsafe")
    return x


def _turn(q: np.ndarray, turn: np.ndarray, mask: np.ndarray, cs: np.ndarray) -> None:
    """:func:`shift_hue` on int16 ``q`` (11, k, 1, H, W): R, G, B in eighths of a level in,
    turned and in whole levels out, then scratch; ``turn`` the shift in sixths in [0, 6)."""
    r, g, b, v, c, c3, c5, c2, h, t, base = q
    np.maximum(np.maximum(r, g, out=v), b, out=v)
    np.subtract(v, np.minimum(np.minimum(r, g, out=c), b, out=c), out=c)
    np.add(c, c, out=c2)
    np.add(c2, c, out=c3)
    np.add(c3, c2, out=c5)
    # c * (hue + 1) in [0, 6c): blue's formula, green's where green is the max, red's where red
    # is (red wins ties, then green, as torchvision); blended in as h += (t - h) * mask, twice
    # as fast as a masked copy
    np.add(np.subtract(r, g, out=h), c5, out=h)
    for p, (y, z), centre in ((g, (b, r), c3), (r, (g, b), c)):
        np.add(np.subtract(y, z, out=t), centre, out=t)
        np.multiply(np.subtract(t, h, out=t), np.equal(v, p, out=mask), out=t)
        h += t
    # + c s, s the shift: h in [0, 12c), 12 * 8 * 255 < 2**15
    np.rint(np.multiply(c, turn, out=cs), out=cs)
    np.copyto(t, cs, casting="unsafe")  # then an int16 add: twice as fast as a mixed one
    h += t
    np.add(c5, c, out=t)  # 6c
    np.greater_equal(h, t, out=mask)
    h -= np.multiply(t, mask, out=t)  # around the circle, into [0, 6c)
    # d = 3 - e / c, e = ||h - c centre| - 3c|, centres 1, 3, 5 (R, G, B): clamp(d - 1, 0,
    # 1) = 2 - clamp(e / c, 1, 2), so the channel is v - 2c + clamp(e, c, 2c)
    np.subtract(v, c2, out=base)
    base += 4  # rounded half up to whole levels
    rgb = q[:3]  # the three channels at once, against their centres c, 3c, 5c
    np.abs(np.subtract(h, q[4:7], out=rgb), out=rgb)
    np.abs(np.subtract(rgb, c3, out=rgb), out=rgb)
    np.minimum(np.maximum(rgb, c, out=rgb), c2, out=rgb)
    rgb += base
    rgb >>= 3
