"""The warp kernel: RandAugment's shears, translations and rotations as a nearest-neighbour
gather, each output pixel reading the input pixel a precomputed index names (the index made
once per distinct warp, shared by all the samples that drew it); and the per-sample
projective gather of RandomAffine / RandomRotation / RandomPerspective (``project``)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["affine_index", "gather", "gather_planes", "project", "shear_index"]


@njit(cache=True, nogil=True)
def gather(x: np.ndarray, rows: np.ndarray, which: np.ndarray, index: np.ndarray) -> None:
    """Warp samples ``rows`` of the uint8 RGB batch ``x`` (B, 3, H, W) in place: pixel ``p``
    of each channel of sample ``rows[j]`` takes pixel ``index[which[j], p]`` of the same
    channel (uint32 into the ``H * W`` pixels of a plane; ``H * W`` itself: the fill, 0).
    The three channels in one loop, so each index is read once; unsigned, so numba adds no
    negative-index wraparound."""
    _, _, h, w = x.shape
    n = h * w
    src = np.zeros((3, n + 1), np.uint8)  # the sample and the fill
    for j in range(len(rows)):
        px = x[rows[j]].reshape(3, n)
        k = index[which[j]]
        r, g, b, out_r, out_g, out_b = src[0], src[1], src[2], px[0], px[1], px[2]
        for p in range(n):  # a loop: numba's 2-D slice copy is slower
            r[p], g[p], b[p] = out_r[p], out_g[p], out_b[p]
        for p in range(n):
            q = k[p]
            out_r[p] = r[q]
            out_g[p] = g[q]
            out_b[p] = b[q]


@njit(cache=True, nogil=True)
def gather_planes(
    x: np.ndarray, rows: np.ndarray, which: np.ndarray, index: np.ndarray, fill: int
) -> None:
    """:func:`gather` for a C-contiguous batch of planes ``x`` (B, H, W) of any integer dtype
    (a mask: compiled once per dtype): pixel ``p`` of sample ``rows[j]`` takes pixel
    ``index[which[j], p]``, ``H * W`` being ``fill``."""
    _, h, w = x.shape
    n = h * w
    src = np.empty(n + 1, x.dtype)
    src[n] = fill
    for j in range(len(rows)):
        px = x[rows[j]].reshape(n)
        k = index[which[j]]
        for p in range(n):
            src[p] = px[p]
        for p in range(n):
            px[p] = src[k[p]]


@njit(cache=True, nogil=True)
def affine_index(m: np.ndarray, h: int, w: int) -> np.ndarray:
    """The :func:`gather` index (uint32, ``(len(m), h * w)``) of each inverse affine map
    ``m[u]`` (2, 3) from output to input pixel coordinates, sampled at pixel centres as PIL's
    ``Image.transform(AFFINE, NEAREST)``: input ``floor(a * (x + .5) + (b * (y + .5) + c))``
    across, likewise down; ``h * w`` outside."""
    index = np.empty((len(m), h * w), np.uint32)
    for u in range(len(m)):
        for y in range(h):
            across = m[u, 0, 1] * (y + 0.5) + m[u, 0, 2]  # a row part plus a column part
            down = m[u, 1, 1] * (y + 0.5) + m[u, 1, 2]
            for x in range(w):
                sx = np.floor(m[u, 0, 0] * (x + 0.5) + across)
                sy = np.floor(m[u, 1, 0] * (x + 0.5) + down)
                inside = 0 <= sx < w and 0 <= sy < h
                index[u, y * w + x] = np.int64(sy * w + sx) if inside else h * w
    return index


@njit(cache=True, nogil=True)
def shear_index(shifts: np.ndarray, h: int, w: int, across: bool) -> np.ndarray:
    """The :func:`gather` index (uint32, ``(len(shifts), h * w)``) of each shear by whole
    pixels per line, ``shifts[u]``: output pixel ``(y, x)`` reads input
    ``(y, x + shifts[u, y])`` when ``across`` (each row shifted), else
    ``(y + shifts[u, x], x)`` (each column); ``h * w`` outside."""
    index = np.empty((len(shifts), h * w), np.uint32)
    for u in range(len(shifts)):
        for y in range(h):
            for x in range(w):
                sy = y if across else y + shifts[u, x]
                sx = x + shifts[u, y] if across else x
                inside = 0 <= sx < w and 0 <= sy < h
                index[u, y * w + x] = sy * w + sx if inside else h * w
    return index


@njit(cache=True, nogil=True, error_model="numpy")  # a 0 denominator: inf, outside
def project(x: np.ndarray, rows: np.ndarray, m: np.ndarray, fill: int) -> None:
    """Warp samples ``rows`` of the C-contiguous batch ``x`` (B, C, H, W), any integer dtype
    that holds ``fill``, in place, sample ``rows[j]`` by its own map ``m[j]`` (3, 3) from
    output pixel ``p = (x, y, 1)`` (centres at whole numbers) to input pixel coordinates:
    ``sx = m[0] . p / m[2] . p``, likewise ``sy``; the pixel read is ``(rint(sy), rint(sx))``
    (half to even: ``grid_sample``'s nearest), ``fill`` outside. Each index is computed once
    and read by every channel."""
    _, c, h, w = x.shape
    n = h * w
    src = np.empty((c, n + 1), x.dtype)
    for k in range(c):
        src[k, n] = fill
    q = np.empty(w, np.int64)  # a row's source indices
    for j in range(len(rows)):
        px = x[rows[j]].reshape(c, n)
        for k in range(c):
            for p in range(n):
                src[k, p] = px[k, p]
        t = m[j]
        for y in range(h):
            ax, ay, az = t[0, 1] * y + t[0, 2], t[1, 1] * y + t[1, 2], t[2, 1] * y + t[2, 2]
            for xx in range(w):  # branch-free, so the row's index vectorises
                den = t[2, 0] * xx + az
                sx = np.rint((t[0, 0] * xx + ax) / den)
                sy = np.rint((t[1, 0] * xx + ay) / den)
                inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)  # False for nan
                q[xx] = np.int64(sy * w + sx) if inside else n
            row = y * w
            for k in range(c):
                out, s = px[k], src[k]
                for xx in range(w):
                    out[row + xx] = s[q[xx]]
