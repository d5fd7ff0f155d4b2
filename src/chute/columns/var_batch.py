"""What the writer appends for a values+offsets field (ragged, bytes, string, image): its own
module so that the converters that make one (``values``, ``images``) import it, not each
other."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class VarBatch(NamedTuple):
    """A batch of a values+offsets field: flat values, per-sample lengths, optional shapes
    (a Ragged field's) or sizes (an Image field's (N, 2) int32 height, width)."""

    values: np.ndarray
    lengths: np.ndarray
    shapes: np.ndarray | None
    sizes: np.ndarray | None = None
