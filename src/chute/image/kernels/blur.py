"""The separable blur kernel of :class:`chute.GaussianBlur`: each channel of a sample along
its columns, then along its rows, reflect-padded as torchvision's ``gaussian_blur``, summed
in float32 and rounded half up once at the end."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["separable"]


@njit(cache=True, nogil=True, fastmath=True)
def separable(x: np.ndarray, rows: np.ndarray, taps: np.ndarray, radius: np.ndarray) -> None:
    """Blur samples ``rows`` of the uint8 batch ``x`` (B, C, H, W) in place, sample
    ``rows[j]`` with the middle ``2 * radius[j] + 1`` taps of the symmetric kernel
    ``taps[j]`` (``radius[j]`` < H and W; 0 leaves the sample as it is).

    Per output row: the column pass sums the ``2r + 1`` input rows around it (from a copy of
    the channel, as rows are overwritten) into a float row with ``r`` reflected pixels either
    side, the row pass sums ``2r + 1`` shifted runs of it. Every inner loop runs along a row,
    so each vectorises."""
    _, ch, h, w = x.shape
    centre = taps.shape[1] // 2
    wide = np.empty(w + 2 * radius.max(), np.float32)
    acc = np.empty(w, np.float32)
    for j in range(len(rows)):
        r = radius[j]
        if r == 0:
            continue
        tp = taps[j, centre - r : centre + r + 1]
        for c in range(ch):
            plane = x[rows[j], c]
            src = plane.copy()  # faster than numba's slice assignment into a buffer
            mid = wide[r : r + w]
            for y in range(h):
                for i in range(w):  # a plain loop: numba's slice fill is slower
                    mid[i] = 0.0
                for k in range(2 * r + 1):
                    sy = y + k - r
                    sy = -sy if sy < 0 else (2 * h - 2 - sy if sy >= h else sy)
                    tk, line = tp[k], src[sy]
                    for i in range(w):
                        mid[i] += tk * np.float32(line[i])
                for q in range(r):  # wide[r - 1 - q] mirrors wide[r + 1 + q], on both ends
                    wide[r - 1 - q] = wide[r + 1 + q]
                    wide[r + w + q] = wide[r + w - 2 - q]
                for i in range(w):
                    acc[i] = 0.5  # >= 0 with a positive kernel: the cast rounds half up
                for k in range(2 * r + 1):
                    tk = tp[k]
                    for i in range(w):
                        acc[i] += tk * wide[i + k]
                out = plane[y]
                for i in range(w):
                    out[i] = np.uint8(acc[i])
