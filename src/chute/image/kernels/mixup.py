"""The MixUp kernel: each uint8 image of a batch blended with the one before it, in one pass
into a new batch, rounded half up."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["mix"]


@njit(cache=True, nogil=True, fastmath=True)
def mix(x: np.ndarray, lam: float, out: np.ndarray) -> None:
    """``out[i] = x[i] * lam + x[i - 1] * (1 - lam)``, rounded half up, for the C-contiguous
    uint8 batches ``x`` and ``out`` of one shape (sample 0 mixed with the last: the batch
    rolled by one, as torchvision)."""
    b = x.shape[0]
    n = x.size // max(b, 1)
    flat, dst = x.reshape(b, n), out.reshape(b, n)
    keep, take = np.float32(lam), np.float32(1.0 - lam)
    for i in range(b):
        own, other, o = flat[i], flat[i - 1 if i else b - 1], dst[i]
        for k in range(n):  # a convex blend of two levels: in [0, 255], no clamp
            o[k] = np.uint8(keep * np.float32(own[k]) + take * np.float32(other[k]) + 0.5)
