"""Augmentations of decoded image batches, run on the whole batch with torch ops in the
loader's worker threads, each one's randomness a pure function of (seed, epoch, sample index).

Two kinds:

- **Per-sample ops** (:class:`ColorJitter`, :class:`Grayscale`, :class:`GaussianBlur`,
  :class:`RandomErasing`) go in an image field's ``decode=`` list after its crop:
  ``decode={"image": [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(),
  chute.ColorJitter(0.4, 0.4, 0.4), chute.RandomErasing()]}``. Op ``k`` of the list draws
  from stream ``k`` (:func:`chute.image.uniforms`), so a sample's augmentation depends on
  its index only, never on its batch. The uint8 batch is converted to float32 once, every
  op applied in list order, and rounded back once.
- **Batch transforms** (:class:`MixUp`, :class:`CutMix`, or any :class:`BatchTransform`)
  mix samples and labels: ``Loader(..., transform=chute.MixUp(num_classes=10))``. The loader
  calls them with each batch's sample indices, its seed and epoch; partners are the batch
  rolled by one (as torchvision), the mixing weight drawn from (seed, epoch, the batch's
  first index), so a resumed run mixes exactly as the first one did.

Written with torch's own batched ops (no kernels by hand, no extra dependency: torchvision
and Kornia cannot share the pinned torch here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ArgumentError, SchemaError
from .draws import uniforms

__all__ = [
    "AUGMENTS",
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

_GRAY = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights


def _col(v: np.ndarray) -> torch.Tensor:
    """Per-sample numbers as a (B, 1, 1, 1) float32 tensor."""
    return torch.from_numpy(np.asarray(v, np.float32)).reshape(-1, 1, 1, 1)


def _gray(x: torch.Tensor) -> torch.Tensor:
    return (x[:, 0:1] * _GRAY[0] + x[:, 1:2] * _GRAY[1] + x[:, 2:3] * _GRAY[2]).clamp(0, 255)


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

    def apply(self, x: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        for j, (name, v) in enumerate(
            (
                ("brightness", self.brightness),
                ("contrast", self.contrast),
                ("saturation", self.saturation),
            )
        ):
            if v == 0:
                continue
            lo, hi = _range(name, v, 1.0)
            f = _col(lo + (hi - lo) * u[:, j])
            if name == "brightness":
                x = (x * f).clamp(0, 255)
            elif name == "contrast":
                mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
                x = (x * f + mean * (1 - f)).clamp(0, 255)
            else:
                x = (x * f + _gray(x) * (1 - f)).clamp(0, 255)
        if self.hue:
            x = _shift_hue(x, _col(self.hue * (2 * u[:, 3] - 1)))
        return x


def _shift_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate the hue of float RGB in [0, 255] by ``shift`` turns (torchvision's HSV maths)."""
    r, g, b = x[:, 0:1] / 255, x[:, 1:2] / 255, x[:, 2:3] / 255
    maxc, minc = torch.maximum(torch.maximum(r, g), b), torch.minimum(torch.minimum(r, g), b)
    v, cr = maxc, maxc - minc
    s = cr / torch.where(maxc == 0, torch.ones_like(maxc), maxc)
    crd = torch.where(cr == 0, torch.ones_like(cr), cr)
    rc, gc, bc = (maxc - r) / crd, (maxc - g) / crd, (maxc - b) / crd
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.fmod(h / 6.0 + 1.0 + shift, 1.0)
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.to(torch.int64) % 6
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    sel = [i == k for k in range(6)]

    def pick(*c: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(v)
        for m, ck in zip(sel, c, strict=True):
            out = torch.where(m, ck, out)
        return out

    return (
        torch.cat([pick(v, q, p, p, t, v), pick(t, v, v, q, p, p), pick(p, p, t, v, v, q)], 1) * 255
    )


@dataclass(frozen=True)
class Grayscale:
    """torchvision's ``RandomGrayscale``: with probability ``p``, the luma (ITU-R 601-2
    weights) in all three channels."""

    p: float = 0.1
    draws = 1

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise ArgumentError(f"Grayscale: p must be in [0, 1], got {self.p}")

    def apply(self, x: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        on = torch.from_numpy(u[:, 0] < self.p).reshape(-1, 1, 1, 1)
        return torch.where(on, _gray(x).expand_as(x), x)


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

    def apply(self, x: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        b, c, h, w = x.shape
        k = self.kernel_size
        sig = self.sigma[0] + (self.sigma[1] - self.sigma[0]) * u[:, 0]
        r = np.arange(k) - (k - 1) / 2
        ker = np.exp(-0.5 * (r[None, :] / sig[:, None]) ** 2)
        ker = np.where((u[:, 1] < self.p)[:, None], ker / ker.sum(1, keepdims=True), r == 0)
        wt = torch.from_numpy(np.repeat(ker.astype(np.float32), c, axis=0))  # (B*C, k)
        pad = min(k // 2, h - 1, w - 1)
        y = x.reshape(1, b * c, h, w)
        if pad < k // 2:  # reflect padding needs the image larger than the kernel's half
            return x
        y = F.pad(y, (pad, pad, pad, pad), mode="reflect")
        y = F.conv2d(y, wt.reshape(b * c, 1, 1, k), groups=b * c)
        y = F.conv2d(y, wt.reshape(b * c, 1, k, 1), groups=b * c)
        return y.reshape(b, c, h, w)


@dataclass(frozen=True)
class RandomErasing:
    """torchvision's ``RandomErasing``: with probability ``p``, a rectangle of ``scale`` of
    the area and aspect ratio log-uniform in ``ratio`` (10 tries, else nothing) is set to
    ``value``."""

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

    def apply(self, x: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        b, _, h, w = x.shape
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
        for i in np.flatnonzero((u[:, 0] < self.p) & ok.any(axis=1)).tolist():
            x[i, :, top[i] : top[i] + eh[i], left[i] : left[i] + ew[i]] = self.value
        return x


AUGMENTS = (ColorJitter, Grayscale, GaussianBlur, RandomErasing)
"""The per-sample ops a ``decode=`` list may hold after its crop."""


def augment(ops: Any, out: torch.Tensor, indices: Any, seed: int, epoch: int) -> None:
    """Apply the :data:`AUGMENTS` among ``ops`` (op ``k`` drawing from stream ``k``) to the
    uint8 ``(B, 3, H, W)`` batch ``out`` in place: in float32, rounded back once."""
    todo = [(k, op) for k, op in enumerate(ops) if isinstance(op, AUGMENTS)]
    if not todo or len(out) == 0:
        return
    idx = np.asarray(indices, np.int64).reshape(-1)
    x = out.float()
    for k, op in todo:
        x = op.apply(x, uniforms(seed, epoch, idx, k, op.draws))
    out.copy_(x.round_().clamp_(0, 255))


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
        mixed = img.float() * lam + img.roll(1, 0).float() * (1 - lam)
        return {
            **batch,
            self.image: mixed.round_().to(img.dtype),
            self.label: onehot * lam + onehot.roll(1, 0) * (1 - lam),
        }


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
        out = img.clone()
        out[..., y0:y1, x0:x1] = img.roll(1, 0)[..., y0:y1, x0:x1]
        kept = 1.0 - (x1 - x0) * (y1 - y0) / (w * h)
        return {
            **batch,
            self.image: out,
            self.label: onehot * kept + onehot.roll(1, 0) * (1 - kept),
        }
