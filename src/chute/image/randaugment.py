"""RandAugment and TrivialAugmentWide on decoded uint8 batches: torchvision's 14 ops and
magnitude tables, each sample's ops, magnitudes and signs drawn from (seed, epoch, sample
index) like every op of :mod:`chute.image.augment`.

They go in an image field's ``decode=`` list after its crop::

    decode={"image": [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
                      chute.RandAugment(num_ops=2, magnitude=9)]}

Each round, the samples that drew the same op are transformed together in place, each by a
compiled kernel (numba, :mod:`chute.image.kernels`) that takes the batch and the sample
indices, so no rows are copied out: shears, translations and rotations as a
nearest-neighbour gather with PIL's pixel-centre convention, from one index per distinct
warp (``warp``); brightness, colour and contrast as PIL's ``ImageEnhance`` blends
(``color``); sharpness as PIL's SMOOTH filter and blend (``sharpen``); posterize, solarize,
autocontrast and equalize with PIL's ``ImageOps`` rules, the last two through a per-channel
lookup table made from the channel's range or histogram (``levels``). Interpolation is
nearest and the fill 0, torchvision's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentValueError
from .checks import check_batch, check_draws, check_rows, integer
from .kernels import load

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


MAX_BINS = 1024
"""The most magnitude bins (torchvision's default is 31): each batch makes the
``(len(OPS), bins)`` table of :func:`magnitudes`."""

MAX_OPS = 64
"""The most RandAugment rounds (torchvision's default is 2): each draws two uniforms per
sample and is a pass over the batch."""


def _check_bins(name: str, bins: int) -> None:
    integer(name, "num_magnitude_bins", bins, 2, MAX_BINS)


def _check(name: str, out: torch.Tensor, u: np.ndarray, draws: int) -> bool:
    """Check ``out`` and ``u`` for ``name``'s ``apply`` (:mod:`chute.image.checks`);
    whether the batch has no pixel (nothing to do)."""
    check_batch(name, out)
    check_draws(name, out, u, draws)
    return out.numel() == 0


@dataclass(frozen=True)
class RandAugment:
    """torchvision's ``RandAugment``: ``num_ops`` rounds, each applying one of :data:`OPS`
    (uniform) at bin ``magnitude`` of ``num_magnitude_bins``, negated with probability 1/2
    for the signed ops; drawn per sample."""

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31

    def __post_init__(self) -> None:
        integer("RandAugment", "num_ops", self.num_ops, 0, MAX_OPS)
        _check_bins("RandAugment", self.num_magnitude_bins)
        integer("RandAugment", "magnitude", self.magnitude, 0, self.num_magnitude_bins - 1)

    @property
    def draws(self) -> int:
        return 2 * self.num_ops  # per round: the op, the sign

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Augment the uint8 batch ``out`` (B, 3, H, W) in place; returns it."""
        if _check("RandAugment", out, u, self.draws):
            return out
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
        if _check("TrivialAugmentWide", out, u, self.draws):
            return out
        bins = self.num_magnitude_bins
        op, b = _pick(u[:, 0], len(OPS)), _pick(u[:, 1], bins)
        apply_ops(out, op, magnitudes(True, bins, *out.shape[-2:])[op, b] * _sign(op, u[:, 2]))
        return out


def _pick(u: np.ndarray, n: int) -> np.ndarray:
    return np.minimum((u * n).astype(np.int64), n - 1)


def _sign(op: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.where(_SIGNED[op] & (u < 0.5), -1.0, 1.0)


def apply_ops(out: torch.Tensor, op: np.ndarray, mag: np.ndarray) -> None:
    """Apply op ``OPS[op[i]]`` at magnitude ``mag[i]`` (finite) to sample ``i`` of the
    contiguous uint8 batch ``out`` (B, 3, H, W) in place, each op once for all the samples
    that drew it."""
    check_batch("apply_ops", out)
    op = check_rows("apply_ops", op, len(OPS), "op number")
    mag = np.asarray(mag)
    if not len(op) == len(mag) == len(out) or mag.ndim != 1:
        raise ArgumentValueError(
            f"apply_ops: one op and one magnitude per sample, got {len(op)} ops and "
            f"{mag.shape} magnitudes for {len(out)} samples"
        )
    if mag.dtype.kind not in "iuf":
        raise ArgumentError(f"apply_ops: magnitudes must be numbers, got {mag.dtype}")
    if not np.isfinite(mag).all():
        raise ArgumentValueError("apply_ops: magnitudes must be finite")
    bits = mag[op == OPS.index("Posterize")]
    if len(bits) and not ((bits >= 0) & (bits <= 8)).all():
        raise ArgumentValueError(f"apply_ops: Posterize keeps 0 to 8 bits, got {bits.tolist()}")
    pixels = out.numpy()
    for k, name in enumerate(OPS[1:], 1):
        sel = np.flatnonzero(op == k)
        if len(sel):
            _APPLY[name](pixels, sel, mag[sel])


Op = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
"""An op on samples ``rows`` of a uint8 batch (B, 3, H, W), in place, at their magnitudes."""


# ------------------------------------------------------------------ geometric ops


IndexOf = Callable[[np.ndarray], np.ndarray]
"""Distinct warps' keys (a row each) to their index (uint32, a row each): each output pixel's
input pixel in its plane, ``H * W`` for 0."""


def _warp(x: np.ndarray, rows: np.ndarray, keys: np.ndarray, index: IndexOf) -> None:
    """Nearest-neighbour warp of samples ``rows`` of ``x`` in place, sample ``rows[i]`` by the
    warp ``keys[i]`` (a row of numbers): output pixel ``k`` takes input pixel
    ``index(warps)[u, k]`` of its plane (``H * W`` for the fill, 0), ``warps[u]`` the sample's
    key. Each distinct warp's index is made once (the ops draw few magnitudes: RandAugment
    two, +-m) and shared by its samples."""
    warps, which = np.unique(keys.reshape(len(rows), -1), axis=0, return_inverse=True)
    load("warp").gather(x, rows, which.reshape(-1), index(warps))


def _affine(x: np.ndarray, rows: np.ndarray, m: np.ndarray) -> None:
    """Warp by inverse affine maps ``m`` (n, 2, 3) from output to input pixel coordinates,
    sampled at pixel centres as PIL's ``Image.transform(AFFINE, NEAREST)``; outside: 0."""
    h, w = x.shape[-2:]
    _warp(x, rows, m, lambda k: load("warp").affine_index(k.reshape(-1, 2, 3), h, w))


def _shear(x: np.ndarray, rows: np.ndarray, mag: np.ndarray, dim: int) -> None:
    """Shear about the top-left corner, as torchvision (``center=[0, 0]``): along ``dim`` (3:
    each row shifted, ShearX; 2: each column, ShearY) output pixel ``i`` of line ``j`` reads
    input ``i + floor(0.5 + mag * (j + 0.5))``, PIL's pixel-centre nearest sample; outside:
    0. A whole-pixel shift per line: the index in integers."""
    h, w = x.shape[-2:]
    lines = np.arange(h if dim == 3 else w) + 0.5

    def index(keys: np.ndarray) -> np.ndarray:
        shifts = np.floor(0.5 + keys[:, :1] * lines).astype(np.int64)
        return load("warp").shear_index(shifts, h, w, dim == 3)

    _warp(x, rows, mag, index)


def _shear_x(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    _shear(x, rows, mag, 3)


def _shear_y(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    _shear(x, rows, mag, 2)


def _translate(x: np.ndarray, rows: np.ndarray, mag: np.ndarray, along: int) -> None:
    """Shift by whole pixels (torchvision: ``int(magnitude)``) right (``along`` 0) or down (1),
    zeros shifted in: the affine warp that reads input ``x - d`` (or ``y - d``)."""
    m = np.zeros((len(rows), 2, 3))
    m[:, 0, 0] = m[:, 1, 1] = 1.0
    m[:, along, 2] = -np.trunc(mag)
    _affine(x, rows, m)


def _translate_x(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    _translate(x, rows, mag, 0)


def _translate_y(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    _translate(x, rows, mag, 1)


def _rotate(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    """Counter-clockwise by ``mag`` degrees about the image centre, as PIL's ``rotate``."""
    h, w = x.shape[-2:]
    cx, cy = w / 2.0, h / 2.0
    a = -np.radians(mag)
    cos, sin = np.round(np.cos(a), 15), np.round(np.sin(a), 15)
    m = np.empty((len(mag), 2, 3))
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, sin, -sin, cos
    m[:, 0, 2] = cos * -cx + sin * -cy + cx
    m[:, 1, 2] = -sin * -cx + cos * -cy + cy
    _affine(x, rows, m)


# ------------------------------------------------------------------ colour ops


_BLENDS = ("Brightness", "Contrast", "Color")
"""PIL's ``ImageEnhance`` blends with black, the mean luma and each pixel's luma:
torchvision's brightness, contrast and saturation adjustments, the colour kernel's order."""


def _blend(name: str) -> Op:
    """PIL's ``ImageEnhance`` blend ``name`` at factor ``1 + magnitude``: that factor of the
    colour kernel, the others 1."""
    which = _BLENDS.index(name)

    def run(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
        f = np.ones((3, len(rows)))
        f[which] = 1.0 + mag
        load("color").adjust(x, rows, *f, np.zeros(len(rows)))

    return run


def _sharpness(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    load("sharpen").sharpen(x, rows, 1.0 + mag)


def _posterize(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    load("levels").posterize(x, rows, mag.astype(np.int64))


def _solarize(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    """Invert the pixels >= the threshold ``ceil(mag)``, as PIL's ``ImageOps.solarize``."""
    load("levels").solarize(x, rows, np.minimum(np.ceil(mag), 255).astype(np.int64))


def _autocontrast(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    load("levels").autocontrast(x, rows)


def _equalize(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
    load("levels").equalize(x, rows)


_APPLY: dict[str, Op] = {
    "ShearX": _shear_x,
    "ShearY": _shear_y,
    "TranslateX": _translate_x,
    "TranslateY": _translate_y,
    "Rotate": _rotate,
    "Sharpness": _sharpness,
    "Brightness": _blend("Brightness"),
    "Contrast": _blend("Contrast"),
    "Color": _blend("Color"),
    "Posterize": _posterize,
    "Solarize": _solarize,
    "AutoContrast": _autocontrast,
    "Equalize": _equalize,
}
