"""How :class:`chute.windows` copies a batch of windows out of one part of a token stream in
stored document order: the token field and its aligned fields (``columns``, each the batch's
``(B, length)`` rows, the part's values and the value an ``eos`` takes there) by the same
indices.

* No ``eos``: a window inside a part is a slice of its values, so a batch of them is one
  strided copy (a sliding-window view indexed by the window starts), no Python per window.
* ``eos``: a window inside a part is the part's tokens from ``a`` on with an ``eos`` after each
  document that ends in it. With numba installed (the ``image`` extra), one compiled loop
  copies each row's runs between two eos straight into the rows (:mod:`chute.reader.eos_kernel`):
  one copy, where the strided copy above makes two (numpy's fancy index, then the rows).
  Without it, the rows are copied as without ``eos`` (``length`` tokens from ``a``), then
  placed by one boolean assignment into rows ``length + K`` wide (``K``: the most eos in a
  window of the batch) whose eos slots, and the ``K - k`` slots past each row's ``length - k``
  tokens, are masked out; the eos are set after: no flat index, a few passes over the batch.
* Anything else (a window across a part boundary, the padded tail, the last window of a part):
  a flat index per token (numpy, no Python per document), the eos positions set after.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..columns.segments import segments

__all__ = ["Column", "compiled_eos", "copy_rows", "copy_rows_eos", "copy_segments"]

Column = tuple[np.ndarray, np.ndarray, Any]  # (the batch's (B, L) rows, the part's values, eos)
_KERNEL: list[Any] = []  # the compiled eos copy, or None without numba: looked up once


def compiled_eos() -> Any:
    """:func:`chute.reader.eos_kernel.windows_eos`, or None when numba is not installed."""
    if not _KERNEL:
        try:
            from .eos_kernel import windows_eos
        except ImportError:
            _KERNEL.append(None)
        else:
            _KERNEL.append(windows_eos)
    return _KERNEL[0]


def copy_rows(columns: list[Column], sel: np.ndarray, x: np.ndarray, length: int) -> None:
    """Rows ``sel`` of each column: its values ``x[i] ... x[i] + length - 1`` (one strided copy)."""
    for rows, values, _ in columns:
        rows[sel] = np.lib.stride_tricks.sliding_window_view(values, length)[x]


def copy_rows_eos(
    columns: list[Column],
    sel: np.ndarray,
    x: np.ndarray,
    eos_at: np.ndarray,
    length: int,
    compiled: bool = True,
) -> np.ndarray:
    """Rows ``sel``, windows wholly inside the part's share of a stream with an eos at each
    of ``eos_at`` (sorted), starting at ``x``: compiled when numba is there and ``compiled``,
    else by the boolean assignment of the module doc. Returns which of ``sel`` it wrote (the
    boolean assignment leaves those whose ``length`` tokens run past the part's values)."""
    ex = np.searchsorted(eos_at, x, side="left")  # eos before x: the real start is x - ex
    kernel = compiled_eos() if compiled else None
    if kernel is not None:
        for rows, values, eos in columns:
            kernel(rows, sel, values, x, ex, eos_at, eos, length)
        return np.ones(len(sel), bool)
    ey = np.searchsorted(eos_at, x + length, side="left")
    a = x - ex
    done = a + length <= len(columns[0][1])
    if not done.all():
        sel, x, ex, ey, a = sel[done], x[done], ex[done], ey[done], a[done]
    m = len(sel)
    if not m:
        return done
    k = ey - ex
    widest = int(k.max())
    width = length + widest
    row_at = np.arange(m, dtype=np.int64) * width
    slots = np.ones(m * width, bool)
    eos_pos = np.repeat(row_at - x, k) + eos_at[segments(ex, k, len(eos_at))]
    slots[eos_pos] = False
    if widest:
        slots[segments(row_at + length + k, widest - k, len(slots))] = False
    for rows, values, eos in columns:
        wide = np.empty((m, width), rows.dtype)
        flat = wide.reshape(-1)
        flat[slots] = np.lib.stride_tricks.sliding_window_view(values, length)[a].reshape(-1)
        flat[eos_pos] = eos
        rows[sel] = wide[:, :length]
    return done


def copy_segments(
    columns: list[Column],
    dst: np.ndarray,
    x: np.ndarray,
    n: np.ndarray,
    eos_at: np.ndarray | None,
) -> None:
    """Segments ``[x, x + n)`` of the part's share of the stream (eos included when
    ``eos_at``) into the flattened rows at ``dst``: one flat index for the values, the eos
    positions set after."""
    size = columns[0][0].size
    where = segments(dst, n, size)
    if eos_at is None:
        for rows, values, _ in columns:
            rows.reshape(-1)[where] = values[segments(x, n, len(values))]
        return
    ex = np.searchsorted(eos_at, x, side="left")
    ey = np.searchsorted(eos_at, x + n, side="left")
    keep = np.ones(len(where), bool)
    if (ey > ex).any():
        count = ey - ex
        seg_base = np.cumsum(n) - n
        owner = np.repeat(np.arange(len(x)), count)
        e = eos_at[segments(ex, count, len(eos_at))]
        keep[seg_base[owner] + (e - x[owner])] = False
    real = where[keep]
    eos_where = where[~keep]
    src = segments(x - ex, n - (ey - ex), len(columns[0][1]))
    for rows, values, eos in columns:
        flat = rows.reshape(-1)
        flat[real] = values[src]
        flat[eos_where] = eos
