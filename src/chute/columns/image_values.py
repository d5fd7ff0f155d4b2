"""The writer's side of :class:`chute.fields.Image` fields: user images -> JPEG bytes + sizes.

A value may be a PIL image, encoded bytes (any format PIL reads), a uint8 array or tensor
(``(H, W, 3)``, ``(3, H, W)`` or ``(H, W)``), or an :class:`~chute.image.codec.EncodedImage`
(already encoded: stored as it is). Each is encoded by :func:`chute.image.encode_image` with
the field's ``max_side`` and ``quality``; a batch of several images that need work is encoded
in a few threads (PIL and libjpeg-turbo release the GIL), in order.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import ArgumentError, FormatError, SchemaError
from ..image.codec import EncodedImage, check_encoded, encode_image
from .var_batch import VarBatch

__all__ = ["prepare_images"]

_POOL: ThreadPoolExecutor | None = None
_PID = 0


def _pool() -> ThreadPoolExecutor:
    global _POOL, _PID
    if _POOL is None or os.getpid() != _PID:  # a forked child gets a pool of its own
        _POOL = ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="chute-encode")
        _PID = os.getpid()
    return _POOL


def prepare_images(
    values: Any, max_side: int | None, quality: int, name: str, start: int
) -> VarBatch:
    """Encode a batch of images for field ``name`` (samples ``start``...), each shrunk to
    ``max_side`` and encoded at ``quality`` where it needs encoding: the bytes,
    their lengths and the (N, 2) int32 sizes. A value that is not an image is a
    :class:`~chute.SchemaError` naming the field and sample."""
    values = list(values)

    def one(i: int) -> EncodedImage:
        v = values[i]
        try:
            if isinstance(v, EncodedImage):
                check_encoded(v)
                return v
            return encode_image(v, max_side, quality)
        except (ArgumentError, FormatError) as exc:
            raise SchemaError(f"field {name!r}, sample {start + i}: {exc}") from None

    todo = sum(not isinstance(v, EncodedImage) for v in values)
    if todo >= 4:
        encoded = list(_pool().map(one, range(len(values))))
    else:
        encoded = [one(i) for i in range(len(values))]
    lengths = np.array([len(e.data) for e in encoded], np.int64)
    flat = np.frombuffer(b"".join(e.data for e in encoded), np.uint8)
    sizes = np.array([(e.height, e.width) for e in encoded], np.int32).reshape(-1, 2)
    return VarBatch(flat, lengths, None, sizes)
