"""numpy helpers shared by the stages."""

from __future__ import annotations

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
