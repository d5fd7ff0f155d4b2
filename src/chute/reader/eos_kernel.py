"""The compiled copy of :func:`chute.windows` ``eos=`` rows (numba, in the ``image`` extra;
loaded by :func:`chute.reader.window_fill.compiled_eos` when numba is installed, else the
numpy placement of :mod:`chute.reader.window_fill` runs): each row's runs of tokens between
two eos copied by one loop, one pass over the batch, without the GIL.

It checks no index (numba does not either): its caller passes windows wholly inside the
part's share of the stream, ``ex`` the first eos at or after each start."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["windows_eos"]


@njit(nogil=True, cache=True)
def windows_eos(
    rows: np.ndarray,
    sel: np.ndarray,
    values: np.ndarray,
    x: np.ndarray,
    ex: np.ndarray,
    eos_at: np.ndarray,
    eos: Any,
    length: int,
) -> None:  # pragma: no cover - compiled: runs as machine code, coverage cannot see it
    """Row ``sel[i]`` of ``rows``: ``length`` positions of the stream from ``x[i]`` (the
    part's ``values`` with an ``eos`` at each of ``eos_at``)."""
    for i in range(len(sel)):
        r, s, j = sel[i], x[i], ex[i]
        src, pos = s - j, 0
        while pos < length:
            q = eos_at[j] - s if j < len(eos_at) else length
            end = min(q, length)
            rows[r, pos:end] = values[src : src + end - pos]  # a loop would not vectorise
            src += end - pos
            if q < length:
                rows[r, q] = eos
                j += 1
                pos = q + 1
            else:
                pos = length
