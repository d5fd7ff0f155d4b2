"""The colour kernel: torchvision's brightness, contrast, saturation and hue adjustments of
``ColorJitter`` (and RandAugment's Brightness, Contrast, Color; Grayscale is saturation 0)
in one pass over each sample's uint8 pixels, in float32, clamped to [0, 255] after each
adjustment as torchvision does, rounded half up once at the end."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["GRAY", "adjust"]

GRAY = (0.2989, 0.587, 0.114)
"""ITU-R 601-2 luma weights, torchvision's ``rgb_to_grayscale``."""

_R, _G, _B = (np.float32(w) for w in GRAY)
_ZERO, _HALF, _ONE, _SIX = (np.float32(v) for v in (0.0, 0.5, 1.0, 6.0))


@njit(cache=True, nogil=True, fastmath=True)
def _clamp(v: float) -> float:
    return min(max(v, _ZERO), np.float32(255.0))


@njit(cache=True, nogil=True, fastmath=True)
def _spoke(hue: float, centre: float, value: float, chroma: float) -> float:
    """A channel of the colour of ``hue`` (sixths of a turn, in [0, 6)) with that value and
    chroma: ``v - c * clamp(d - 1, 0, 1)``, ``d`` the distance around the circle from the
    hue to the channel's own (``centre``: red 0, green 2, blue 4). torchvision's HSV to RGB
    without a branch, so the loop vectorises."""
    d = hue - centre + np.float32(3.0)
    d = abs(d - _SIX * np.floor(d * np.float32(1.0 / 6.0)) - np.float32(3.0))
    return value - chroma * min(max(d - _ONE, _ZERO), _ONE)


@njit(cache=True, nogil=True, fastmath=True)
def _blend(r: float, g: float, bl: float, b: float, c: float, mean: float, s: float) -> tuple:
    """The colour ``r, g, bl`` after brightness ``b``, contrast ``c`` (to ``mean``, the mean
    luma times ``1 - c``) and saturation ``s``, each clamped to [0, 255]."""
    r, g, bl = _clamp(r * b), _clamp(g * b), _clamp(bl * b)
    r, g, bl = _clamp(r * c + mean), _clamp(g * c + mean), _clamp(bl * c + mean)
    luma = (_R * r + _G * g + _B * bl) * (_ONE - s)
    return _clamp(r * s + luma), _clamp(g * s + luma), _clamp(bl * s + luma)


@njit(cache=True, nogil=True, fastmath=True)
def _turn(r: float, g: float, bl: float, turn: float) -> tuple:
    """The colour ``r, g, bl`` with its hue turned by ``turn`` sixths, value and chroma kept."""
    v = max(max(r, g), bl)
    chroma = v - min(min(r, g), bl)
    inv = _ONE / max(chroma, np.float32(1e-6))
    # the hue in sixths: red's formula where red is the max, then green's (ties as
    # torchvision), else blue's
    hh = np.float32(4.0) + (r - g) * inv
    hh = np.float32(2.0) + (bl - r) * inv if v == g else hh
    hh = (g - bl) * inv if v == r else hh
    hh += turn
    hh -= _SIX * np.floor(hh * np.float32(1.0 / 6.0))
    return (
        _spoke(hh, _ZERO, v, chroma),
        _spoke(hh, np.float32(2.0), v, chroma),
        _spoke(hh, np.float32(4.0), v, chroma),
    )


@njit(cache=True, nogil=True, fastmath=True)
def _round(r: float, g: float, bl: float) -> tuple:
    """``r, g, bl`` (in [0, 255]) rounded half up to uint8: the cast truncates."""
    return np.uint8(r + _HALF), np.uint8(g + _HALF), np.uint8(bl + _HALF)


@njit(cache=True, nogil=True, fastmath=True)
def adjust(
    x: np.ndarray,
    rows: np.ndarray,
    brightness: np.ndarray,
    contrast: np.ndarray,
    saturation: np.ndarray,
    hue: np.ndarray,
) -> None:
    """Adjust samples ``rows`` of the uint8 batch ``x`` (B, 3, H, W) in place, sample
    ``rows[j]`` by factors ``brightness[j]``, ``contrast[j]``, ``saturation[j]`` (1: none)
    and a hue shift of ``hue[j]`` turns (0: none), in that order.

    Brightness scales; contrast blends with the sample's mean luma (after brightness: a
    first pass sums it); saturation blends with each pixel's luma; hue keeps each pixel's
    value and chroma and turns its hue."""
    _, _, h, w = x.shape
    n = h * w
    for j in range(len(rows)):
        px = x[rows[j]].reshape(3, n)
        b, c, s = np.float32(brightness[j]), np.float32(contrast[j]), np.float32(saturation[j])
        turn = np.float32(hue[j] % 1.0) * _SIX
        mean = _ZERO
        if c != _ONE:
            total = 0.0
            for p in range(n):
                r, g, bl = _clamp(px[0, p] * b), _clamp(px[1, p] * b), _clamp(px[2, p] * b)
                total += _R * r + _G * g + _B * bl
            mean = np.float32(total / n) * (_ONE - c)
        if turn == _ZERO:  # its own loop: the hue turn's branches would keep it scalar
            for p in range(n):
                r, g, bl = _blend(px[0, p], px[1, p], px[2, p], b, c, mean, s)
                px[0, p], px[1, p], px[2, p] = _round(r, g, bl)
        else:
            for p in range(n):
                r, g, bl = _blend(px[0, p], px[1, p], px[2, p], b, c, mean, s)
                r, g, bl = _turn(r, g, bl, turn)
                px[0, p], px[1, p], px[2, p] = _round(r, g, bl)
