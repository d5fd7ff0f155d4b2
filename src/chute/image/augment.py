"""Augmentations of decoded image batches, run on the whole batch with torch ops in the
loader's worker threads, each one's randomness a pure function of (seed, epoch, sample index).

Two kinds:

- **Per-sample ops** (:class:`ColorJitter`, :class:`Grayscale`, :class:`GaussianBlur`,
  :class:`RandomErasing`, and RandAugment / TrivialAugmentWide of
  :mod:`chute.image.randaugment`) go in an image field's ``decode=`` list after its crop:
  ``decode={"image": [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
  chute.ColorJitter(0.4, 0.4, 0.4), chute.RandomErasing()]}``. Op ``k`` of the list draws
  from stream ``k`` (:func:`chute.image.uniforms`), so a sample's augmentation depends on
  its index only, never on its batch. Ops run in list order on the uint8 batch itself, only
  on the samples they draw; the per-pixel ones (colour, blur, RandAugment's) through the
  compiled kernels of :mod:`chute.image.kernels`, one pass per op, without the GIL.
- **Batch transforms** (:class:`MixUp`, :class:`CutMix`, or any :class:`BatchTransform`)
  mix samples and labels: ``Loader(..., transform=chute.MixUp(num_classes=10))``. The loader
  calls them with each batch's sample indices, its seed and epoch; partners are the batch
  rolled by one (as torchvision), the mixing weight drawn from (seed, epoch, the batch's
  first index), so a resumed run mixes exactly as the first one did.

The kernels are numba (in the ``image`` extra, as FFCV does): torch's and numpy's batched
ops make one pass over the batch per elementary op, and a full ``ColorJitter`` cost four
times as much that way. Kornia and torchvision's functional ops are torch ops too (and
torchvision cannot share the pinned torch here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ArgumentError, SchemaError
from .blur import blur, gaussian_taps
from .draws import uniforms
from .kernels import load
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


def _range(
    name: str, value: float, centre: float, bound: float | None = None
) -> tuple[float, float]:
    if not value >= 0:
        raise ArgumentError(f"ColorJitter: {name} must be >= 0, got {value}")
    lo, hi = centre - value, centre + value
    if bound is not None and value > bound:
        raise ArgumentError(f"ColorJitter: {name} must be <= {bound}, got {value}")
    return (max(lo, 0.0), hi)


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

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise ArgumentError(f"Grayscale: p must be in [0, 1], got {self.p}")

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Turn the drawn samples of the uint8 batch ``out`` gray in place; returns it."""
        on = np.flatnonzero(u[:, 0] < self.p)
        if len(on):
            one, zero = np.ones(len(on)), np.zeros(len(on))
            load("color").adjust(out.numpy(), on, one, one, zero, zero)  # saturation 0
        return out


@dataclass(frozen=True)
class GaussianBlur:
    """torchvision's ``GaussianBlur``: an odd ``kernel_size`` Gaussian with sigma uniform in
    ``sigma`` per sample, reflect-padded; applied with probability ``p``."""

    kernel_size: int = 9
    sigma: tuple[float, float] = (0.1, 2.0)
    p: float = 1.0
    draws = 2

    def __post_init__(self) -> None:
        k = self.kernel_size
        if type(k) is not int or k < 1 or k % 2 == 0:
            raise ArgumentError(f"GaussianBlur: kernel_size must be an odd positive int, got {k!r}")
        if not 0 < self.sigma[0] <= self.sigma[1]:
            raise ArgumentError(f"GaussianBlur: sigma must be 0 < lo <= hi, got {self.sigma}")

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Blur the drawn samples of the uint8 batch ``out`` (B, 3, H, W) in place; returns
        it."""
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
    ``value`` (rounded to a uint8 level)."""

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float = 0.0
    draws = 41  # apply?, then 10 tries x (area, log-ratio, top, left)

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise ArgumentError(f"RandomErasing: p must be in [0, 1], got {self.p}")
        if not (0 < self.scale[0] <= self.scale[1] <= 1 and 0 < self.ratio[0] <= self.ratio[1]):
            raise ArgumentError(f"RandomErasing: bad scale {self.scale} or ratio {self.ratio}")

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Erase the drawn rectangles of the uint8 batch ``out`` in place; returns it."""
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
        value = int(np.floor(min(max(self.value, 0.0), 255.0) + 0.5))
        for i in np.flatnonzero((u[:, 0] < self.p) & ok.any(axis=1)).tolist():
            out[i, :, top[i] : top[i] + eh[i], left[i] : left[i] + ew[i]] = value
        return out


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
)
"""The per-sample ops a ``decode=`` list may hold after its crop."""


def augment(ops: Any, out: torch.Tensor, indices: Any, seed: int, epoch: int) -> None:
    """Apply the :data:`AUGMENTS` among ``ops`` (op ``k`` drawing from stream ``k``) to the
    uint8 ``(B, 3, H, W)`` batch ``out`` in place, in list order."""
    if len(out) == 0:
        return
    idx = np.asarray(indices, np.int64).reshape(-1)
    work = out if out.is_contiguous() else out.contiguous()  # the kernels' layout
    for k, op in enumerate(ops):
        if isinstance(op, AUGMENTS):
            aug = cast(Augment, op)
            aug.apply(work, uniforms(seed, epoch, idx, k, aug.draws))
    if work is not out:
        out.copy_(work)


class BatchTransform:
    """A batch transform that sees each batch's sample indices, the loader's seed and the
    epoch: ``Loader(transform=...)`` calls ``apply(batch, indices, seed, epoch)``, so its
    randomness can be a pure function of them (exact resume). Subclass it for your own."""

    def apply(self, batch: dict[str, Any], indices: np.ndarray, seed: int, epoch: int) -> Any:
        raise NotImplementedError


def indexed_transform(
    transform: Callable[..., Any] | None, seed: int
) -> Callable[[dict[str, Any], np.ndarray, int], Any] | None:
    """``transform=`` as the loader's workers call it: ``f(batch, indices, epoch)``."""
    if transform is None:
        return None
    if isinstance(transform, BatchTransform):
        bt = transform
        return lambda batch, indices, epoch: bt.apply(batch, indices, seed, epoch)
    if not callable(transform):
        raise ArgumentError(f"transform must be callable, got {transform!r}")
    fn = transform
    return lambda batch, indices, epoch: fn(batch)


@dataclass(frozen=True)
class _Mixing(BatchTransform):
    num_classes: int
    alpha: float = 1.0
    image: str = "image"
    label: str = "label"

    def __post_init__(self) -> None:
        if type(self.num_classes) is not int or self.num_classes < 1:
            raise ArgumentError(f"{type(self).__name__}: num_classes must be a positive int")
        if not self.alpha > 0:
            raise ArgumentError(f"{type(self).__name__}: alpha must be > 0, got {self.alpha}")

    def _parts(
        self, batch: Mapping[str, Any], indices: np.ndarray, seed: int, epoch: int
    ) -> tuple[torch.Tensor, torch.Tensor, np.random.Generator]:
        for k in (self.image, self.label):
            if k not in batch:
                raise SchemaError(f"{type(self).__name__}: the batch has no field {k!r}")
        img, lab = batch[self.image], batch[self.label]
        first = int(np.asarray(indices).reshape(-1)[0]) if len(indices) else 0
        rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, first, 0x4D495855])
        onehot = F.one_hot(lab.long().reshape(-1), self.num_classes).float()
        return img, onehot, rng


class MixUp(_Mixing):
    """torchvision's ``MixUp``: each image blended with the next of the batch (rolled by
    one), weight ``lam ~ Beta(alpha, alpha)`` per batch; the label becomes float32 one-hot
    ``(B, num_classes)`` mixed alike. The image stays uint8 (rounded)."""

    def apply(self, batch: dict[str, Any], indices: np.ndarray, seed: int, epoch: int) -> Any:
        img, onehot, rng = self._parts(batch, indices, seed, epoch)
        lam = float(rng.beta(self.alpha, self.alpha))
        return {
            **batch,
            self.image: _blend(img, lam),
            self.label: onehot * lam + onehot.roll(1, 0) * (1 - lam),
        }


def _blend(img: torch.Tensor, lam: float) -> torch.Tensor:
    """``img * lam + img.roll(1, 0) * (1 - lam)``, rounded: a uint8 batch on the CPU in one
    compiled pass (:mod:`chute.image.kernels.mix`), another dtype or device by torch."""
    if img.dtype != torch.uint8 or img.device.type != "cpu":
        return (img.float() * lam + img.roll(1, 0).float() * (1 - lam)).round_().to(img.dtype)
    src = img.contiguous()
    mixed = torch.empty_like(src)
    load("mix").mix(src.numpy(), lam, mixed.numpy())
    return mixed


class CutMix(_Mixing):
    """torchvision's ``CutMix``: a box of ``1 - lam`` of the area (``lam ~ Beta(alpha,
    alpha)`` per batch, centre uniform, clipped) pasted from the next image of the batch;
    labels mixed by the area actually pasted (float32 one-hot ``(B, num_classes)``)."""

    def apply(self, batch: dict[str, Any], indices: np.ndarray, seed: int, epoch: int) -> Any:
        img, onehot, rng = self._parts(batch, indices, seed, epoch)
        lam = float(rng.beta(self.alpha, self.alpha))
        h, w = img.shape[-2:]
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        r = math.sqrt(1.0 - lam)
        x0, x1 = max(cx - int(r * w / 2), 0), min(cx + int(r * w / 2), w)
        y0, y1 = max(cy - int(r * h / 2), 0), min(cy + int(r * h / 2), h)
        out = img.clone()  # the box from the previous image (the last one's into the first)
        out[1:, ..., y0:y1, x0:x1] = img[:-1, ..., y0:y1, x0:x1]
        out[:1, ..., y0:y1, x0:x1] = img[-1:, ..., y0:y1, x0:x1]
        kept = 1.0 - (x1 - x0) * (y1 - y0) / (w * h)
        return {
            **batch,
            self.image: out,
            self.label: onehot * kept + onehot.roll(1, 0) * (1 - kept),
        }
