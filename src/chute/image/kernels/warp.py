"""The warp kernel: RandAugment's shears, translations and rotations as a nearest-neighbour
gather, each output pixel reading the input pixel a precomputed index names (the index made
once per distinct warp, shared by all the samples that drew it)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["gather"]


@njit(cache=True, nogil=True)
def gather(x: np.ndarray, rows: np.ndarray, which: np.ndarray, index: np.ndarray) -> None:
    """Warp samples ``rows`` of the uint8 RGB batch ``x`` (B, 3, H, W) in place: pixel ``p``
    of each channel of sample ``rows[j]`` takes pixel ``index[which[j], p]`` of the same
    channel (uint32 into the ``H * W`` pixels of a plane; ``H * W`` itself: the fill, 0).
    The three channels in one loop, so each index is read once; unsigned, so numba adds no
    negative-index wraparound."""
    _, _, h, w = x.shape
    n = h * w
    src = np.zeros((3, n + 1), np.uint8)  # the sample and the fill
    for j in range(len(rows)):
        px = x[rows[j]].reshape(3, n)
        k = index[which[j]]
        r, g, b, out_r, out_g, out_b = src[0], src[1], src[2], px[0], px[1], px[2]
        for p in range(n):  # a loop: numba's 2-D slice copy is slower
            r[p], g[p], b[p] = out_r[p], out_g[p], out_b[p]
        for p in range(n):
            q = k[p]
            out_r[p] = r[q]
            out_g[p] = g[q]
            out_b[p] = b[q]
