"""The level kernels: RandAugment's AutoContrast and Equalize as PIL's ``ImageOps`` rules
(a lookup table per channel made from its min and max or its histogram), Posterize and
Solarize, each in one pass over each sample's uint8 pixels (two for the tables: the
statistics, then the lookup)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["autocontrast", "equalize", "posterize", "solarize"]


@njit(cache=True, nogil=True)
def _look_up(plane: np.ndarray, lut: np.ndarray) -> None:
    for p in range(len(plane)):
        plane[p] = lut[plane[p]]


@njit(cache=True, nogil=True)
def autocontrast(x: np.ndarray, rows: np.ndarray) -> None:
    """Stretch each channel of samples ``rows`` of the uint8 batch ``x`` (B, C, H, W) to
    [0, 255] in place: level ``v`` to ``v * s - lo * s`` truncated, ``s = 255 / (hi - lo)``
    (float64, as ``ImageOps.autocontrast``); a channel of one level is kept."""
    _, c, h, w = x.shape
    lut = np.empty(256, np.uint8)
    for j in range(len(rows)):
        px = x[rows[j]].reshape(c, h * w)
        for ch in range(c):
            plane = px[ch]
            lo, hi = np.uint8(255), np.uint8(0)
            for p in range(len(plane)):
                lo, hi = min(lo, plane[p]), max(hi, plane[p])
            if hi > lo:
                scale, low = 255.0 / (np.int64(hi) - np.int64(lo)), np.float64(lo)
                for v in range(256):
                    lut[v] = np.uint8(min(max(v * scale - low * scale, 0.0), 255.0))
                _look_up(plane, lut)


@njit(cache=True, nogil=True)
def equalize(x: np.ndarray, rows: np.ndarray) -> None:
    """Equalize each channel's histogram of samples ``rows`` of the uint8 RGB batch ``x``
    (B, 3, H, W) in place, as ``ImageOps.equalize``: ``step`` is the pixels but those of the
    top level over 255, level ``v`` goes to ``(below(v) + step // 2) // step`` (at most 255);
    a channel with ``step`` 0 is kept. The three channels counted in one loop, two pixels
    at a time into separate histograms, so equal neighbours do not wait on each other's
    count."""
    _, _, h, w = x.shape
    n = h * w
    lut = np.empty(256, np.uint8)
    for j in range(len(rows)):
        px = x[rows[j]].reshape(3, n)
        r, g, b = px[0], px[1], px[2]
        counts = np.zeros((2, 3, 256), np.int64)
        for p in range(0, n - 1, 2):
            counts[0, 0, r[p]] += 1
            counts[0, 1, g[p]] += 1
            counts[0, 2, b[p]] += 1
            counts[1, 0, r[p + 1]] += 1
            counts[1, 1, g[p + 1]] += 1
            counts[1, 2, b[p + 1]] += 1
        for ch in range(3):
            if n % 2:
                counts[0, ch, px[ch, n - 1]] += 1
            hist = counts[0, ch] + counts[1, ch]
            last = 255
            while hist[last] == 0:
                last -= 1
            step = (n - hist[last]) // 255
            if step > 0:
                below = 0
                for v in range(256):
                    lut[v] = min((below + step // 2) // step, 255)
                    below += hist[v]
                _look_up(px[ch], lut)


@njit(cache=True, nogil=True)
def posterize(x: np.ndarray, rows: np.ndarray, bits: np.ndarray) -> None:
    """Keep the top ``bits[j]`` bits (1 to 8) of each pixel of sample ``rows[j]`` of the uint8
    batch ``x`` in place, as ``ImageOps.posterize``."""
    for j in range(len(rows)):
        px = x[rows[j]].reshape(-1)
        keep = np.uint8(256 - (1 << (8 - bits[j])))
        for p in range(len(px)):
            px[p] &= keep


@njit(cache=True, nogil=True)
def solarize(x: np.ndarray, rows: np.ndarray, threshold: np.ndarray) -> None:
    """Invert (``255 - p``, an xor with 255 in uint8) each pixel ``p >= threshold[j]`` (0 to
    255) of sample ``rows[j]`` of the uint8 batch ``x`` in place, as ``ImageOps.solarize``."""
    for j in range(len(rows)):
        px = x[rows[j]].reshape(-1)
        t = np.uint8(threshold[j])
        for p in range(len(px)):
            px[p] ^= np.uint8(255) if px[p] >= t else np.uint8(0)
