"""numpy helpers shared by the stages."""

from __future__ import annotations

import sys

import numpy as np


def distinct(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (``np.unique(a)``), without the ``import numpy.ma``
    that numpy 2's ``np.unique`` does on its first call: ~0.1 s holding the GIL, paid by the
    first batch of every fresh process (and by the downloads running beside it)."""
    s = np.sort(np.asarray(a).ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


# The largest buffer a thread keeps for its next batch (image scratch, gathered JPEG bytes):
# larger ones (a one-off gather of a whole dataset, a huge panorama) are freed after use, not
# held for the thread's lifetime.
KEEP_MAX = 64 << 20


def idle_buffer(bufs: list[np.ndarray], nbytes: int) -> np.ndarray | None:
    """A buffer of ``bufs[1:]`` of at least ``nbytes`` that nothing but ``bufs`` refers to (no
    array, view or tensor made from it is alive), or None. ``bufs[0]`` is an array that only
    ``bufs`` refers to: the reference count to compare with, read the same way as the
    buffers' (not a constant: interpreters differ). How buffers are reused while a batch
    someone keeps is never written over (the Loader's pool, the image gather's bytes)."""
    idle = 0
    for i, raw in enumerate(bufs):
        if i == 0:
            idle = sys.getrefcount(raw)
        elif sys.getrefcount(raw) == idle and len(raw) >= nbytes:
            return raw
    return None
