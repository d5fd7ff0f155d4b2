"""Segmented copies: ``out[at[k]:at[k] + n[k]] = src[starts[k]:starts[k] + n[k]]`` for each
sample ``k`` of a variable-size batch, the copy behind :func:`chute.columns.gather.gather_var`
(ragged, bytes, string and image fields).

With numba installed (``pip install chute[image]``), one compiled loop copies every sample's
bytes without the GIL and without Python per sample
(:func:`chute.columns.segments_kernel.copy_rows`): samples of any size at ``memcpy`` speed, and
a :class:`~chute.Loader`'s threads gather in parallel. numba is imported on the first copy,
never by ``import chute`` (about 0.5 s, once per process, on the first variable-size gather);
the loops are compiled once per machine and cached on disk (numba's ``cache=True``). Without
numba, numpy: tiny samples (under :data:`TINY_SAMPLE_VALUES` values on average) by one
``take`` of a flat int32 index (:func:`segments`), larger ones slice by slice (Python per
sample, which their size amortises, but holding the GIL).

Where the copy goes: a new array (:func:`new_output`), unless the calling thread is inside
:class:`Outputs`, whose allocator then gives the memory (a :class:`~chute.Loader`'s worker
gathers into buffers reused once nothing refers to them: ``chute/buffers.py``).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import SampleIndexError

__all__ = ["TINY_SAMPLE_VALUES", "Outputs", "copy_segments", "kernels", "new_output", "segments"]

TINY_SAMPLE_VALUES = 128
"""Without numba: below this many values per sample on average, a segmented copy builds one
flat index and does one ``take`` (Python per sample would dominate); above, it copies each
sample's slice (memcpy speed, no index). Measured by ``benchmarks/ragged_gather.py``."""


_THREAD = threading.local()  # this thread's allocator of outputs (Outputs)


class Outputs:
    """``with Outputs(alloc):`` :func:`new_output` in this thread takes its memory from
    ``alloc(nbytes)`` (a uint8 array of ``nbytes`` that owns its memory or views one that
    does: the output is a view of it, so the allocator sees from reference counts when
    nothing uses it any more). A class, not a generator: entered once per batch."""

    __slots__ = ("alloc", "before")

    def __init__(self, alloc: Callable[[int], np.ndarray]) -> None:
        self.alloc = alloc

    def __enter__(self) -> None:
        self.before = getattr(_THREAD, "alloc", None)
        _THREAD.alloc = self.alloc

    def __exit__(self, *exc: object) -> None:
        _THREAD.alloc = self.before


def new_output(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Uninitialized memory for a variable-size gather's values: from this thread's
    :class:`Outputs` allocator when inside one, else a new array."""
    alloc = getattr(_THREAD, "alloc", None)
    if alloc is None:
        return np.empty(shape, dtype)
    dtype = np.dtype(dtype)
    return alloc(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)


@functools.cache
def kernels() -> ModuleType | None:
    """The compiled loops (:mod:`chute.columns.segments_kernel`), or None without numba.
    Imported on first use."""
    try:
        from . import segments_kernel
    except ImportError:
        return None
    return segments_kernel


def copy_segments(
    src: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    at: np.ndarray,
    out: np.ndarray,
    compiled: bool = True,
) -> None:
    """Copy rows ``[starts[k], starts[k] + lengths[k])`` of ``src`` to rows ``[at[k], ...)``
    of ``out`` for each ``k`` (int64 arrays; the segments must lie inside ``src`` and ``out``,
    as the gathers check; ``src`` and ``out`` share a dtype and the shape past their first
    dimension). ``compiled``: the compiled copy when numba is installed, else (False) the numpy
    copy (the tests compare the two)."""
    if not len(starts):
        return
    compiled_loops = kernels() if compiled else None
    if compiled_loops is not None and src.flags.c_contiguous and out.flags.c_contiguous:
        row = src.itemsize * math.prod(src.shape[1:])  # bytes per row
        bad = compiled_loops.copy_rows(
            src.reshape(-1).view(np.uint8), starts, lengths, at, row, out.reshape(-1).view(np.uint8)
        )
        if bad >= 0:  # the callers check every segment: a bug, never a corrupt file
            raise SampleIndexError(
                f"segment {bad} (rows {int(starts[bad])}+{int(lengths[bad])} to row "
                f"{int(at[bad])}) is outside the source's {len(src)} or the output's {len(out)}"
            )
        return
    total = int(lengths.sum())
    if total < TINY_SAMPLE_VALUES * len(starts):  # one take, no Python per sample
        a = int(at[0])
        if np.array_equal(at[1:], at[:-1] + lengths[:-1]):  # one run: take straight into out
            flat = segments(starts, lengths, len(src), at - a)
            np.take(src, flat, axis=0, out=out[a : a + total], mode="clip")
        else:
            flat = segments(starts, lengths, len(src))
            out[segments(at, lengths, len(out))] = np.take(src, flat, axis=0, mode="clip")
        return
    for s, n, a in zip(starts.tolist(), lengths.tolist(), at.tolist(), strict=True):
        out[a : a + n] = src[s : s + n]


def segments(
    starts: np.ndarray, lengths: np.ndarray, size: int, at: np.ndarray | None = None
) -> np.ndarray:
    """The flat index of the segments ``[starts[i], starts[i] + lengths[i])`` into an array of
    ``size`` rows, one after the other: ``concatenate([arange(s, s + n) for s, n in ...])``
    without Python per segment. ``at``: where each segment begins in the result, the running
    sum of ``lengths`` from 0, when the caller has it. int32 when ``size`` allows (half the
    memory of int64)."""
    dtype = np.int32 if size < 2**31 else np.int64
    if at is None:
        at = np.cumsum(lengths) - lengths
    flat = np.repeat((starts - at).astype(dtype), lengths)
    flat += np.arange(len(flat), dtype=dtype)
    return flat
