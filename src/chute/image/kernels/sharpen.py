"""The sharpness kernel: RandAugment's Sharpness as PIL's ``ImageEnhance.Sharpness``, a blend
of each sample with its ``ImageFilter.SMOOTH`` image, in one pass over each channel."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["sharpen"]

_HALF, _TOP = np.float32(0.5), np.float32(255.5)


@njit(cache=True, nogil=True)
def sharpen(x: np.ndarray, rows: np.ndarray, factor: np.ndarray) -> None:
    """Sharpen samples ``rows`` of the uint8 batch ``x`` (B, C, H, W) in place, sample
    ``rows[j]`` by ``factor[j]`` (1: none): ``smooth + f * (x - smooth)`` in float32, rounded
    half up and clamped to [0, 255], ``smooth`` being PIL's SMOOTH filter (3 x 3, centre 5,
    others 1, over 13, rounded: 13 is odd, no ties). Only the interior: PIL keeps the border
    pixels.

    Vectorised: each channel copied to int32 once, the sums in int32 (numba would widen
    them to int64), ``s // 13`` as ``s * 2521 >> 15`` (exact for the sums here, at most
    3321), the neighbours indexed from a row's start so no index is negative (numba checks
    negative ones for wraparound)."""
    _, c, h, w = x.shape
    src = np.empty((h, w), np.int32)
    for j in range(len(rows)):
        f = np.float32(factor[j])
        for ch in range(c):
            plane = x[rows[j], ch]
            for y in range(h):  # loops: numba's 2-D slice copy is slower
                for i in range(w):
                    src[y, i] = plane[y, i]
            for y in range(h - 2):
                up, mid, down, out = src[y], src[y + 1], src[y + 2], plane[y + 1]
                for i in range(w - 2):
                    centre = mid[i + 1]
                    s = np.int32(
                        up[i] + up[i + 1] + up[i + 2] + mid[i] + 5 * centre + mid[i + 2]
                        + down[i] + down[i + 1] + down[i + 2] + 6
                    )  # fmt: skip
                    smooth = np.int32((s * 2521) >> 15)
                    v = np.float32(np.int32(centre - smooth)) * f + np.float32(smooth) + _HALF
                    out[i + 1] = np.uint8(min(max(v, _HALF), _TOP))
