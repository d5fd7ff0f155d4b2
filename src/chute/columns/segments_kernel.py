"""The compiled loops of the variable-size gathers (numba): the segmented copy and the
samples' bounds. Imported by :mod:`chute.columns.segments` on the first variable-size gather,
never by ``import chute``."""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

__all__ = ["bounds", "copy_rows"]


@njit(cache=True, nogil=True, boundscheck=False)
def copy_rows(
    src: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    at: np.ndarray,
    row: int,
    out: np.ndarray,
) -> int:
    """``out[at[k]:at[k] + lengths[k]] = src[starts[k]:starts[k] + lengths[k]]`` for each
    ``k``, in rows of ``row`` bytes (``src`` and ``out``: uint8, C-contiguous; ``starts``,
    ``lengths``, ``at``: int64). Returns -1, or the first ``k`` whose segment does not lie
    inside ``src`` and ``out`` (nothing copied for it nor after it). The byte indices are
    unsigned: a negative row becomes huge and fails the check, and without numba's
    wraparound check LLVM turns the inner loop into a ``memcpy``."""
    size, room, r = uint64(src.size), uint64(out.size), uint64(row)
    for k in range(starts.shape[0]):
        s, n, a = uint64(starts[k]) * r, uint64(lengths[k]) * r, uint64(at[k]) * r
        if s > size or n > size - s or a > room or n > room - a:
            return k
        for j in range(n):
            out[a + j] = src[s + j]
    return -1


# Holds the GIL: a few microseconds a batch. Released, another thread takes the GIL and this
# one waits for that thread's Python to give it back (2 worker threads on 2 busy cores: the
# shuffled Loader over token documents 1.08-1.46x as fast, median of 8-14 interleaved rounds).
@njit(cache=True)
def bounds(
    offsets: np.ndarray, idx: np.ndarray, size: int, starts: np.ndarray, lengths: np.ndarray
) -> int:
    """``starts[k] = offsets[idx[k]]`` and ``lengths[k] = offsets[idx[k] + 1] - starts[k]``
    for each ``k`` (int64 arrays). Returns -1, or the first ``k`` whose sample does not lie in
    order inside ``size`` values (or whose index is outside ``offsets``)."""
    m = offsets.shape[0] - 1
    for k in range(idx.shape[0]):
        i = idx[k]
        if i < 0 or i >= m:
            return k
        s, e = offsets[i], offsets[i + 1]
        if s < 0 or e < s or e > size:
            return k
        starts[k], lengths[k] = s, e - s
    return -1
