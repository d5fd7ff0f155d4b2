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

    Per output row: the column pass sums the input rows around it (from a copy of the
    channel, as rows are overwritten) into a float row with ``r`` reflected pixels either
    side, the row pass sums shifted runs of it. The kernel is symmetric, so each pass adds
    the two runs at distance ``d`` before one multiply: ``r + 1`` passes, not ``2r + 1``.
    Every inner loop runs along a row over slices (numba checks no index sum), so each
    vectorises."""
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
                t0, line = tp[r], src[y]
                for i in range(w):
                    mid[i] = t0 * np.float32(line[i])
                for k in range(r):  # the rows r - k above and below, reflected at the edges
                    above, below = y + k - r, y + r - k
                    above = -above if above < 0 else above
                    below = 2 * h - 2 - below if below >= h else below
                    tk, a, b = tp[k], src[above], src[below]
                    for i in range(w):
                        mid[i] += tk * (np.float32(a[i]) + np.float32(b[i]))
                for q in range(r):  # wide[r - 1 - q] mirrors wide[r + 1 + q], on both ends
                    wide[r - 1 - q] = wide[r + 1 + q]
                    wide[r + w + q] = wide[r + w - 2 - q]
                for i in range(w):  # >= 0 with a positive kernel: the cast rounds half up
                    acc[i] = 0.5 + t0 * mid[i]
                for k in range(r):
                    tk, a, b = tp[k], wide[k : k + w], wide[2 * r - k : 2 * r - k + w]
                    for i in range(w):
                        acc[i] += tk * (a[i] + b[i])
                out = plane[y]
                for i in range(w):
                    out[i] = np.uint8(acc[i])
