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
from .warps import WARPS, move_images

__all__ = ["OPS", "RandAugment", "Round", "TrivialAugmentWide", "magnitudes"]

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


Round = tuple[np.ndarray, np.ndarray]
"""One round of a RandAugment: each sample's op number (into :data:`OPS`) and signed
magnitude."""

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

    moves = "warp"  # its shears, translations and rotations move pixels after decoding

    @property
    def draws(self) -> int:
        return 2 * self.num_ops  # per round: the op, the sign

    @property
    def rounds_per_sample(self) -> int:
        return self.num_ops

    def rounds(self, u: np.ndarray, height: int, width: int) -> list[Round]:
        """Each round's op numbers and signed magnitudes per sample, for draws ``u`` in an
        output frame of ``height`` x ``width``."""
        table = magnitudes(False, self.num_magnitude_bins, height, width)[:, self.magnitude]
        out = []
        for r in range(self.num_ops):
            op = _pick(u[:, 2 * r], len(OPS))
            out.append((op, table[op] * _sign(op, u[:, 2 * r + 1])))
        return out

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Augment the uint8 batch ``out`` (B, 3, H, W) in place; returns it."""
        if _check("RandAugment", out, u, self.draws):
            return out
        for op, mag in self.rounds(u, *out.shape[-2:]):
            apply_ops(out, op, mag)
        return out


@dataclass(frozen=True)
class TrivialAugmentWide:
    """torchvision's ``TrivialAugmentWide``: one of :data:`OPS` (uniform) at a magnitude bin
    uniform in ``num_magnitude_bins`` of its wide table, negated with probability 1/2 for
    the signed ops; drawn per sample."""

    num_magnitude_bins: int = 31
    draws = 3  # the op, the bin, the sign
    moves = "warp"
    rounds_per_sample = 1

    def __post_init__(self) -> None:
        _check_bins("TrivialAugmentWide", self.num_magnitude_bins)

    def rounds(self, u: np.ndarray, height: int, width: int) -> list[Round]:
        """The op numbers and signed magnitudes per sample (one round), for draws ``u`` in an
        output frame of ``height`` x ``width``."""
        bins = self.num_magnitude_bins
        op, b = _pick(u[:, 0], len(OPS)), _pick(u[:, 1], bins)
        return [(op, magnitudes(True, bins, height, width)[op, b] * _sign(op, u[:, 2]))]

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Augment the uint8 batch ``out`` (B, 3, H, W) in place; returns it."""
        if _check("TrivialAugmentWide", out, u, self.draws):
            return out
        ((op, mag),) = self.rounds(u, *out.shape[-2:])
        apply_ops(out, op, mag)
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


def _warp(name: str) -> Op:
    """Warp ``name`` of :mod:`chute.image.warps`, moving the image's pixels."""

    def run(x: np.ndarray, rows: np.ndarray, mag: np.ndarray) -> None:
        move_images(x, rows, name, mag)

    return run


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
    **{name: _warp(name) for name in WARPS},
    "Sharpness": _sharpness,
    "Brightness": _blend("Brightness"),
    "Contrast": _blend("Contrast"),
    "Color": _blend("Color"),
    "Posterize": _posterize,
    "Solarize": _solarize,
    "AutoContrast": _autocontrast,
    "Equalize": _equalize,
}
