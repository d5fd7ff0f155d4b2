"""RandAugment and TrivialAugmentWide on decoded uint8 batches: torchvision's 14 ops and
magnitude tables, each sample's ops, magnitudes and signs drawn from (seed, epoch, sample
index) like every op of :mod:`chute.image.augment`.

They go in an image field's ``decode=`` list after its crop::

    decode={"image": [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
                      chute.RandAugment(num_ops=2, magnitude=9)]}

Each round, the samples that drew the same op are copied out (numpy row copies), transformed
together and copied back: shears and rotations as a nearest-neighbour gather with PIL's
pixel-centre convention, translations as slice copies, the enhancements (brightness, colour,
contrast, sharpness) on 4 MB float32 chunks as PIL's ``ImageEnhance`` and torchvision do,
posterize as a bit mask, solarize, autocontrast and equalize as per-channel lookup tables
(PIL's ``ImageOps`` rules). Interpolation is nearest and the fill 0, torchvision's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ArgumentError
from .kernels import load
from .scratch import on_rows

__all__ = ["OPS", "RandAugment", "TrivialAugmentWide", "magnitudes"]

OPS = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)
"""torchvision's op set, in its order: a drawn op number indexes this tuple."""

_SIGNED = np.array([name in OPS[1:10] for name in OPS])  # shears to sharpness take a sign


def magnitudes(wide: bool, bins: int, height: int, width: int) -> np.ndarray:
    """``(len(OPS), bins)`` float64: torchvision's magnitude table of each op (RandAugment's,
    or TrivialAugmentWide's when ``wide``), zeros for the ops without one."""
    shear, rotate, enhance, bits = (0.99, 135.0, 0.99, 6) if wide else (0.3, 30.0, 0.9, 4)
    tx, ty = (32.0, 32.0) if wide else (150.0 / 331.0 * width, 150.0 / 331.0 * height)
    table = {
        "ShearX": np.linspace(0.0, shear, bins),
        "ShearY": np.linspace(0.0, shear, bins),
        "TranslateX": np.linspace(0.0, tx, bins),
        "TranslateY": np.linspace(0.0, ty, bins),
        "Rotate": np.linspace(0.0, rotate, bins),
        "Brightness": np.linspace(0.0, enhance, bins),
        "Color": np.linspace(0.0, enhance, bins),
        "Contrast": np.linspace(0.0, enhance, bins),
        "Sharpness": np.linspace(0.0, enhance, bins),
        "Posterize": 8 - np.round(np.arange(bins) / ((bins - 1) / bits)),  # bits kept
        "Solarize": np.linspace(255.0, 0.0, bins),  # the threshold
    }
    return np.stack([table.get(name, np.zeros(bins)) for name in OPS])


def _check_bins(name: str, bins: int) -> None:
    if type(bins) is not int or bins < 2:
        raise ArgumentError(f"{name}: num_magnitude_bins must be an int >= 2, got {bins!r}")


@dataclass(frozen=True)
class RandAugment:
    """torchvision's ``RandAugment``: ``num_ops`` rounds, each applying one of :data:`OPS`
    (uniform) at bin ``magnitude`` of ``num_magnitude_bins``, negated with probability 1/2
    for the signed ops; drawn per sample."""

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31

    def __post_init__(self) -> None:
        if type(self.num_ops) is not int or self.num_ops < 0:
            raise ArgumentError(f"RandAugment: num_ops must be an int >= 0, got {self.num_ops!r}")
        _check_bins("RandAugment", self.num_magnitude_bins)
        if type(self.magnitude) is not int or not 0 <= self.magnitude < self.num_magnitude_bins:
            raise ArgumentError(
                f"RandAugment: magnitude must be an int in [0, {self.num_magnitude_bins}), "
                f"got {self.magnitude!r}"
            )

    @property
    def draws(self) -> int:
        return 2 * self.num_ops  # per round: the op, the sign

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Augment the uint8 batch ``out`` (B, 3, H, W) in place; returns it."""
        table = magnitudes(False, self.num_magnitude_bins, *out.shape[-2:])[:, self.magnitude]
        for r in range(self.num_ops):
            op = _pick(u[:, 2 * r], len(OPS))
            apply_ops(out, op, table[op] * _sign(op, u[:, 2 * r + 1]))
        return out


@dataclass(frozen=True)
class TrivialAugmentWide:
    """torchvision's ``TrivialAugmentWide``: one of :data:`OPS` (uniform) at a magnitude bin
    uniform in ``num_magnitude_bins`` of its wide table, negated with probability 1/2 for
    the signed ops; drawn per sample."""

    num_magnitude_bins: int = 31
    draws = 3  # the op, the bin, the sign

    def __post_init__(self) -> None:
        _check_bins("TrivialAugmentWide", self.num_magnitude_bins)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Augment the uint8 batch ``out`` (B, 3, H, W) in place; returns it."""
        bins = self.num_magnitude_bins
        op, b = _pick(u[:, 0], len(OPS)), _pick(u[:, 1], bins)
        apply_ops(out, op, magnitudes(True, bins, *out.shape[-2:])[op, b] * _sign(op, u[:, 2]))
        return out


def _pick(u: np.ndarray, n: int) -> np.ndarray:
    return np.minimum((u * n).astype(np.int64), n - 1)


def _sign(op: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.where(_SIGNED[op] & (u < 0.5), -1.0, 1.0)


def apply_ops(out: torch.Tensor, op: np.ndarray, mag: np.ndarray) -> None:
    """Apply op ``OPS[op[i]]`` at magnitude ``mag[i]`` to sample ``i`` of the contiguous uint8
    batch ``out`` in place, each op once for all the samples that drew it."""
    for k, name in enumerate(OPS[1:], 1):
        sel = np.flatnonzero(op == k)
        if len(sel) and name in _BLENDS:  # a factor of the colour kernel
            f = np.ones((3, len(sel)))
            f[_BLENDS.index(name)] = 1.0 + mag[sel]
            load("color").adjust(out.numpy(), sel, *f, np.zeros(len(sel)))
        elif len(sel):
            on_rows(out, sel, _APPLY[name], mag[sel])


_BLENDS = ("Brightness", "Contrast", "Color")
"""PIL's ``ImageEnhance`` blends at factor ``1 + magnitude`` with black, the mean luma and
each pixel's luma: torchvision's brightness, contrast and saturation adjustments."""


# ------------------------------------------------------------------ geometric ops

_BLOCK = 8  # samples warped at a time


def _gather(
    x: torch.Tensor, keys: np.ndarray, index: Callable[[np.ndarray], np.ndarray]
) -> torch.Tensor:
    """Nearest-neighbour warp of uint8 ``x`` (n, C, H, W) in place, sample ``i`` by the warp
    ``keys[i]`` (a row of numbers): output pixel ``k`` takes input pixel ``index(key)[k]`` of
    its plane (int64, ``H * W`` for a zero). Each distinct warp's index is made once (the ops
    draw few magnitudes: RandAugment two, +-m) and gathered for all its samples, a few at a
    time so each block stays in cache."""
    n, c, h, w = x.shape
    warps, which = np.unique(keys.reshape(n, -1), axis=0, return_inverse=True)
    which = which.reshape(-1)
    planes = torch.zeros((min(n, _BLOCK), c, h * w + 1), dtype=torch.uint8)
    pixels = x.numpy()
    for u, key in enumerate(warps):
        src = torch.from_numpy(index(key).reshape(1, 1, h * w))
        rows = np.flatnonzero(which == u)
        group = x if len(rows) == n else torch.from_numpy(pixels[rows])  # numpy's row copy
        for a in range(0, len(group), _BLOCK):
            b = min(a + _BLOCK, len(group))
            p = planes[: b - a]
            p[..., :-1] = group[a:b].reshape(b - a, c, h * w)
            out = group[a:b].view(b - a, c, h * w)
            torch.gather(p, 2, src.expand(b - a, c, h * w), out=out)
        if len(rows) != n:
            pixels[rows] = group.numpy()
    return x


def _affine(x: torch.Tensor, m: np.ndarray) -> torch.Tensor:
    """Warp by inverse affine maps ``m`` (n, 2, 3) from output to input pixel coordinates,
    sampled at pixel centres as PIL's ``Image.transform(AFFINE, NEAREST)``; outside: 0."""
    h, w = x.shape[-2:]
    xs, ys = np.arange(w) + 0.5, np.arange(h)[:, None] + 0.5

    def index(k: np.ndarray) -> np.ndarray:
        sx = np.floor(k[0] * xs + (k[1] * ys + k[2]))  # a row part plus a column part
        sy = np.floor(k[3] * xs + (k[4] * ys + k[5]))
        src = (sy * w + sx).astype(np.int64)
        src[(sx < 0) | (sx >= w) | (sy < 0) | (sy >= h)] = h * w
        return src

    return _gather(x, m, index)


def _shear(x: torch.Tensor, mag: np.ndarray, dim: int) -> torch.Tensor:
    """Shear about the top-left corner, as torchvision (``center=[0, 0]``): along ``dim`` (3:
    each row shifted, ShearX; 2: each column, ShearY) output pixel ``i`` of line ``j`` reads
    input ``i + floor(0.5 + mag * (j + 0.5))``, PIL's pixel-centre nearest sample; outside:
    0. A whole-pixel shift per line: the index in integers."""
    h, w = x.shape[-2:]
    size, lines = (w, h) if dim == 3 else (h, w)
    ys, xs = np.arange(h)[:, None], np.arange(w)

    def index(m: np.ndarray) -> np.ndarray:
        shift = np.floor(0.5 + m[0] * (np.arange(lines) + 0.5)).astype(np.int64)
        moved = xs + shift[:, None] if dim == 3 else ys + shift  # per row / per column
        src = moved * w + xs if dim == 2 else ys * w + moved
        src[(moved < 0) | (moved >= size)] = h * w
        return src

    return _gather(x, mag, index)


def _shear_x(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    return _shear(x, mag, 3)


def _shear_y(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    return _shear(x, mag, 2)


def _translate(x: torch.Tensor, shift: np.ndarray, dim: int) -> torch.Tensor:
    """Shift along ``dim`` (3: right, 2: down) by whole pixels, zeros shifted in: one slice
    copy per distinct shift (RandAugment has two, +-m; TrivialAugmentWide at most 62)."""
    src, out = x.numpy(), np.zeros(tuple(x.shape), np.uint8)
    size = x.shape[dim]
    for d in np.unique(shift).astype(int).tolist():
        keep = size - abs(d)
        if keep <= 0:
            continue
        to: list[Any] = [np.flatnonzero(shift == d), slice(None), slice(None), slice(None)]
        of = list(to)
        to[dim], of[dim] = slice(max(d, 0), max(d, 0) + keep), slice(max(-d, 0), max(-d, 0) + keep)
        out[tuple(to)] = src[tuple(of)]
    return torch.from_numpy(out)


def _translate_x(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    return _translate(x, np.trunc(mag), 3)  # torchvision: translate=[int(magnitude), 0]


def _translate_y(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    return _translate(x, np.trunc(mag), 2)


def _rotate(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    """Counter-clockwise by ``mag`` degrees about the image centre, as PIL's ``rotate``."""
    h, w = x.shape[-2:]
    cx, cy = w / 2.0, h / 2.0
    a = -np.radians(mag)
    cos, sin = np.round(np.cos(a), 15), np.round(np.sin(a), 15)
    m = np.empty((len(mag), 2, 3))
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, sin, -sin, cos
    m[:, 0, 2] = cos * -cx + sin * -cy + cx
    m[:, 1, 2] = -sin * -cx + cos * -cy + cy
    return _affine(x, m)


# ------------------------------------------------------------------ colour ops


_SHARPEN_BLOCK = 1 << 18
"""Pixels (all channels) of the samples sharpened at a time: a block's buffers stay in cache."""


def _sharpness(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    """Blend with PIL's ``ImageFilter.SMOOTH`` (3 x 3, centre 5, others 1, over 13; rounded)
    as ``ImageEnhance.Sharpness``: only the interior, the border pixels are kept. The filter
    in int16 (13 times it is at most 3315, and ``(s + 6) // 13`` rounds it: 13 is odd, no
    ties), only the blend in float32; a few samples at a time in buffers made once, each pass
    over a block's pixels as one flat run (the neighbours are at offsets 1 and ``W``; what
    it computes across a border is never kept)."""
    n, c, h, w = x.shape
    if min(h, w) < 3:
        return x
    f = (1.0 + mag).astype(np.float32).reshape(-1, 1)
    pixels = x.numpy()
    per = max(1, _SHARPEN_BLOCK // (c * h * w))
    k = min(per, n)
    q, cols, smooth = np.empty((3, k, c * h * w), np.int16)
    y = np.empty((k, c * h * w), np.float32)
    for a in range(0, n, per):
        m = min(per, n - a)
        size, mid = m * c * h * w, slice(w + 1, m * c * h * w - w - 1)
        qf, vf, sf = q[:m].reshape(-1), cols[:m].reshape(-1), smooth[:m].reshape(-1)
        np.copyto(q[:m], pixels[a : a + m].reshape(m, -1))
        np.add(qf[: size - 2 * w], qf[w : size - w], out=vf[: size - 2 * w])
        vf[: size - 2 * w] += qf[2 * w :]  # column sums, centred one row down
        np.add(vf[: size - 2 * w - 2], vf[1 : size - 2 * w - 1], out=sf[mid])
        sf[mid] += vf[2 : size - 2 * w]
        sf[mid] += np.left_shift(qf[mid], 2, out=vf[mid])  # + 4 centres: 13 times the filter
        sf += 6
        np.floor_divide(sf, 13, out=sf)
        # x * f + smooth * (1 - f) as smooth + f * (x - smooth), rounded half up and clamped
        yb = y[:m]
        np.multiply(np.subtract(q[:m], smooth[:m], out=cols[:m]), f[a : a + m], out=yb)
        np.add(yb, smooth[:m], out=yb)
        yb += 0.5
        np.clip(yb, 0.5, 255.5, out=yb)  # several times faster than maximum + minimum here
        out = yb.reshape(m, c, h, w)[..., 1:-1, 1:-1]
        np.copyto(pixels[a : a + m, :, 1:-1, 1:-1], out, casting="unsafe")
    return x


def _posterize(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    keep = (256 - 2 ** (8 - mag.astype(np.int64))).astype(np.uint8)  # the top `bits` bits
    return x.bitwise_and_(torch.from_numpy(keep).reshape(-1, 1, 1, 1))


def _solarize(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    """Invert the pixels >= the threshold, as PIL's ``ImageOps.solarize``: ``255 - p`` is
    ``p ^ 255`` in uint8, so a compare and an xor with the mask as 0 / 255 (no lookup)."""
    thr = np.minimum(np.ceil(np.asarray(mag)), 255).astype(np.uint8).reshape(-1, 1, 1, 1)
    p = x.numpy()
    flip = np.greater_equal(p, thr).view(np.uint8)
    np.negative(flip, out=flip)  # 1 -> 255
    np.bitwise_xor(p, flip, out=p)
    return x


def _lookup(x: torch.Tensor, luts: np.ndarray) -> torch.Tensor:
    """``luts[i, c][x[i, c]]`` for uint8 ``x`` (n, C, H, W) and uint8 ``luts`` (n, C, 256), in
    place: one numpy take per channel plane (no int64 copy of the pixels)."""
    planes = x.numpy().reshape(-1, x.shape[-2] * x.shape[-1])
    for plane, lut in zip(planes, luts.reshape(-1, 256), strict=True):
        np.take(lut, plane, out=plane)
    return x


def _autocontrast(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    """Each channel's range stretched to [0, 255], as PIL's ``ImageOps.autocontrast``."""
    lo = x.amin(dim=(2, 3)).numpy().astype(np.float64)[..., None]
    hi = x.amax(dim=(2, 3)).numpy().astype(np.float64)[..., None]
    scale = 255.0 / np.maximum(hi - lo, 1)
    v = np.arange(256, dtype=np.float64)
    luts = np.clip(v * scale - lo * scale, 0, 255).astype(np.uint8)
    return _lookup(x, np.where(hi > lo, luts, v.astype(np.uint8)))


def _equalize(x: torch.Tensor, mag: np.ndarray) -> torch.Tensor:
    """Each channel's histogram equalized, as PIL's ``ImageOps.equalize`` (and torchvision)."""
    planes = x.reshape(-1, x.shape[-2] * x.shape[-1])  # torch's bincount: faster on uint8
    hist = torch.stack([torch.bincount(p, minlength=256) for p in planes]).numpy()
    last = 255 - np.argmax(hist[:, ::-1] > 0, axis=1)
    step = (hist.sum(1) - hist[np.arange(len(hist)), last])[:, None] // 255
    below = np.cumsum(hist, 1) - hist  # pixels below each level
    luts = np.minimum((below + step // 2) // np.maximum(step, 1), 255)
    luts = np.where(step > 0, luts, np.arange(256)).astype(np.uint8)
    return _lookup(x, luts)


_APPLY: dict[str, Callable[[torch.Tensor, np.ndarray], torch.Tensor]] = {
    "ShearX": _shear_x,
    "ShearY": _shear_y,
    "TranslateX": _translate_x,
    "TranslateY": _translate_y,
    "Rotate": _rotate,
    "Sharpness": _sharpness,
    "Posterize": _posterize,
    "Solarize": _solarize,
    "AutoContrast": _autocontrast,
    "Equalize": _equalize,
}
