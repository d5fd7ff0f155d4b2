"""Augmentations of decoded image batches, run on the whole batch with torch ops in the
loader's worker threads, each one's randomness a pure function of (seed, epoch, sample index).

Two kinds:

- **Per-sample ops** (:class:`ColorJitter`, :class:`Grayscale`, :class:`GaussianBlur`,
  :class:`RandomErasing`, RandAugment / TrivialAugmentWide of
  :mod:`chute.image.randaugment`, and the per-sample warps of :mod:`chute.image.affine` and
  :mod:`chute.image.perspective`) go in an image field's ``decode=`` list after its crop:
  ``decode={"image": [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
  chute.ColorJitter(0.4, 0.4, 0.4), chute.RandomErasing()]}``. Op ``k`` of the list draws
  from stream ``k`` (:func:`chute.image.uniforms`), so a sample's augmentation depends on
  its index only, never on its batch. Ops run in list order on the uint8 batch itself, only
  on the samples they draw; the per-pixel ones (colour, blur, RandAugment's) through the
  compiled kernels of :mod:`chute.image.kernels`, one pass per op, without the GIL.
- **Batch transforms** (:class:`MixUp`, :class:`CutMix`, or any :class:`BatchTransform`, of
  :mod:`chute.image.mixing`) mix samples and labels:
  ``Loader(..., transform=chute.MixUp(num_classes=10))``.

The kernels are numba (in the ``image`` extra, as FFCV does): torch's and numpy's batched
ops make one pass over the batch per elementary op, and a full ``ColorJitter`` cost four
times as much that way. Kornia and torchvision's functional ops are torch ops too (and
torchvision cannot share the pinned torch here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentValueError
from .affine import RandomAffine, RandomRotation
from .blur_taps import blur, gaussian_taps
from .checks import check_batch, check_draws, integer, number, pair, probability
from .draws import uniforms
from .kernels import load
from .mixing import BatchTransform, CutMix, MixUp, indexed_transform
from .perspective import RandomPerspective
from .randaugment import RandAugment, TrivialAugmentWide

__all__ = [
    "AUGMENTS",
    "Augment",
    "BatchTransform",
    "ColorJitter",
    "CutMix",
    "GaussianBlur",
    "Grayscale",
    "MixUp",
    "RandomErasing",
    "augment",
    "indexed_transform",
]


def _range(name: str, value: float, centre: float, bound: float = math.inf) -> tuple[float, float]:
    v = number("ColorJitter", name, value, 0.0, bound)
    return (max(centre - v, 0.0), centre + v)


@dataclass(frozen=True)
class ColorJitter:
    """torchvision's ``ColorJitter``: brightness, contrast and saturation factors uniform in
    ``[max(0, 1 - v), 1 + v]``, hue shift uniform in ``[-hue, hue]`` (at most 0.5), applied
    in that fixed order (torchvision shuffles the order per call)."""

    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0
    hue: float = 0.0
    draws = 4
    moves = "none"  # followers stay as they are (chute.image.ops.DECODE_OPS)

    def __post_init__(self) -> None:
        _range("brightness", self.brightness, 1.0)
        _range("contrast", self.contrast, 1.0)
        _range("saturation", self.saturation, 1.0)
        _range("hue", self.hue, 0.0, 0.5)

    def _factor(self, j: int, u: np.ndarray) -> np.ndarray:
        """Column ``j`` of ``u`` as brightness (0), contrast (1) or saturation (2) factors."""
        name = ("brightness", "contrast", "saturation")[j]
        lo, hi = _range(name, getattr(self, name), 1.0)
        return lo + (hi - lo) * u[:, j]

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Jitter the uint8 batch ``out`` (B, 3, H, W) in place; returns it."""
        if _empty("ColorJitter", out, u, self.draws, (3,)):
            return out
        hue = self.hue * (2 * u[:, 3] - 1)
        rows = np.arange(len(out))
        load("color").adjust(out.numpy(), rows, *(self._factor(j, u) for j in range(3)), hue)
        return out


@dataclass(frozen=True)
class Grayscale:
    """torchvision's ``RandomGrayscale``: with probability ``p``, the luma (ITU-R 601-2
    weights) in all three channels."""

    p: float = 0.1
    draws = 1
    moves = "none"  # followers stay as they are (chute.image.ops.DECODE_OPS)

    def __post_init__(self) -> None:
        probability("Grayscale", "p", self.p)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Turn the drawn samples of the uint8 batch ``out`` (B, 3, H, W) gray in place;
        returns it. A one-channel batch is gray already: returned as it is."""
        if _empty("Grayscale", out, u, self.draws, (1, 3)) or out.shape[1] == 1:
            return out
        on = np.flatnonzero(u[:, 0] < self.p)
        if len(on):
            one, zero = np.ones(len(on)), np.zeros(len(on))
            load("color").adjust(out.numpy(), on, one, one, zero, zero)  # saturation 0
        return out


@dataclass(frozen=True)
class GaussianBlur:
    """torchvision's ``GaussianBlur``: an odd ``kernel_size`` Gaussian with sigma uniform in
    ``sigma`` per sample, reflect-padded; applied with probability ``p``. Reflect padding
    needs the kernel's radius below the image's height and width: images smaller than that
    are left as they are (torchvision raises)."""

    kernel_size: int = 9
    sigma: tuple[float, float] = (0.1, 2.0)
    p: float = 1.0
    draws = 2
    moves = "none"  # followers stay as they are (chute.image.ops.DECODE_OPS)

    def __post_init__(self) -> None:
        k = integer("GaussianBlur", "kernel_size", self.kernel_size, 1, _MAX_KERNEL)
        if k % 2 == 0:
            raise ArgumentValueError(f"GaussianBlur: kernel_size must be odd, got {k}")
        pair("GaussianBlur", "sigma", self.sigma)
        probability("GaussianBlur", "p", self.p)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Blur the drawn samples of the uint8 batch ``out`` (B, C, H, W) in place; returns
        it."""
        if _empty("GaussianBlur", out, u, self.draws, None):
            return out
        h, w = out.shape[-2:]
        r = self.kernel_size // 2
        on = np.flatnonzero(u[:, 1] < self.p)
        if r == 0 or len(on) == 0 or r > min(h, w) - 1:  # reflect padding needs r < the size
            return out
        sig = self.sigma[0] + (self.sigma[1] - self.sigma[0]) * u[on, 0]
        blur(out, on, gaussian_taps(self.kernel_size, sig))
        return out


@dataclass(frozen=True)
class RandomErasing:
    """torchvision's ``RandomErasing``: with probability ``p``, a rectangle of ``scale`` of
    the area and aspect ratio log-uniform in ``ratio`` (10 tries, else nothing) is set to
    ``value`` (a level in [0, 255], rounded half up)."""

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float = 0.0
    draws = 41  # apply?, then 10 tries x (area, log-ratio, top, left)
    moves = "none"  # followers stay as they are (chute.image.ops.DECODE_OPS)

    def __post_init__(self) -> None:
        probability("RandomErasing", "p", self.p)
        pair("RandomErasing", "scale", self.scale, 0.0, 1.0)
        pair("RandomErasing", "ratio", self.ratio)
        number("RandomErasing", "value", self.value, 0.0, 255.0)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Erase the drawn rectangles of the uint8 batch ``out`` (B, C, H, W) in place;
        returns it."""
        if _empty("RandomErasing", out, u, self.draws, None):
            return out
        b, _, h, w = out.shape
        t = u[:, 1:].reshape(b, 10, 4)
        area = h * w * (self.scale[0] + (self.scale[1] - self.scale[0]) * t[..., 0])
        lr0, lr1 = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = np.exp(lr0 + (lr1 - lr0) * t[..., 1])
        eh, ew = np.round(np.sqrt(area * aspect)), np.round(np.sqrt(area / aspect))
        ok = (eh < h) & (ew < w) & (eh > 0) & (ew > 0)
        first = np.argmax(ok, axis=1)
        rows = np.arange(b)
        eh, ew, tt = eh[rows, first].astype(int), ew[rows, first].astype(int), t[rows, first]
        top = np.floor(tt[:, 2] * (h - eh + 1)).astype(int)
        left = np.floor(tt[:, 3] * (w - ew + 1)).astype(int)
        value = int(np.floor(self.value + 0.5))
        for i in np.flatnonzero((u[:, 0] < self.p) & ok.any(axis=1)).tolist():
            out[i, :, top[i] : top[i] + eh[i], left[i] : left[i] + ew[i]] = value
        return out


_MAX_KERNEL = 1023
"""The largest Gaussian kernel: a radius of 511 pixels."""


def _empty(
    op: str, out: torch.Tensor, u: np.ndarray, draws: int, channels: tuple[int, ...] | None
) -> bool:
    """Check ``out`` and ``u`` for ``op``'s ``apply`` (:mod:`chute.image.checks`); whether
    the batch has no pixel (nothing to do)."""
    check_batch(op, out, channels)
    check_draws(op, out, u, draws)
    return out.numel() == 0


class Augment(Protocol):
    """A per-sample op of a ``decode=`` list: ``draws`` uniforms per sample, and ``apply(out,
    u)`` that works on the contiguous uint8 batch ``out`` in place and returns it."""

    draws: int

    def apply(self, x: torch.Tensor, u: np.ndarray) -> torch.Tensor: ...


AUGMENTS: tuple[type, ...] = (
    ColorJitter,
    Grayscale,
    GaussianBlur,
    RandomErasing,
    RandAugment,
    TrivialAugmentWide,
    RandomAffine,
    RandomRotation,
    RandomPerspective,
)
"""The per-sample ops a ``decode=`` list may hold after its crop."""


def augment(ops: Any, out: torch.Tensor, indices: Any, seed: int, epoch: int) -> None:
    """Apply the :data:`AUGMENTS` among ``ops`` (op ``k`` drawing from stream ``k``) to the
    uint8 ``(B, C, H, W)`` batch ``out`` in place, in list order (each op says which ``C`` it
    takes; a batch without pixels is left as it is); ``indices``: the samples' indices in the
    dataset, one per sample (>= 0), which their draws depend on."""
    check_batch("augment", out, None, contiguous=False)
    idx = np.asarray(indices).reshape(-1)
    if idx.dtype.kind not in "iu" and idx.size:
        raise ArgumentError(f"augment: indices must be integers, got {idx.dtype}")
    if len(idx) != len(out):
        raise ArgumentValueError(
            f"augment: {len(idx)} indices for a batch of {len(out)} samples; give each "
            "sample's index in the dataset"
        )
    if out.numel() == 0:
        return
    if idx.min() < 0:
        raise ArgumentValueError(
            f"augment: index {int(idx.min())} is negative; give each sample's index in the "
            "dataset (>= 0)"
        )
    idx = idx.astype(np.int64, copy=False)
    work = out if out.is_contiguous() else out.contiguous()  # the kernels' layout
    for k, op in enumerate(ops):
        if isinstance(op, AUGMENTS):
            aug = cast(Augment, op)
            aug.apply(work, uniforms(seed, epoch, idx, k, aug.draws))
    if work is not out:
        out.copy_(work)
