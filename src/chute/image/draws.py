"""Counter-based random numbers for decode ops and augmentations: a pure function of (seed,
epoch, sample index, stream, column), computed for a whole batch at once in numpy."""

from __future__ import annotations

import numpy as np

__all__ = ["uniforms"]

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64 with full avalanche."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(
    seed: int, epoch: int, indices: np.ndarray, stream: int, k: int, start: int = 0
) -> np.ndarray:
    """``(B, k)`` float64 uniforms in [0, 1), a pure function of (seed, epoch, index, stream,
    column): the same sample index always draws the same numbers, whatever batch it is in.
    Columns ``start`` to ``start + k - 1`` of the stream (an op that draws until it succeeds
    takes them a block at a time)."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + golden)
        key = _mix(key ^ (np.uint64(epoch & 0xFFFFFFFFFFFFFFFF) * golden))
        key = _mix(key ^ (np.uint64(stream) * np.uint64(0xD1B54A32D192ED03)))
        z = (
            _mix(key ^ (idx * golden))[:, None]
            + np.arange(start + 1, start + k + 1, dtype=np.uint64) * golden
        )
        z = _mix(z & _M64)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
