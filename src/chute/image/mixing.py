"""Batch transforms: ``Loader(..., transform=chute.MixUp(num_classes=10))``. The loader calls
a :class:`BatchTransform` with each batch's sample indices, its seed and epoch. :class:`MixUp`
and :class:`CutMix` partner each sample with the batch rolled by one (as torchvision), the
mixing weight drawn from (seed, epoch, the batch's first index), so a resumed run mixes
exactly as the first one did; each label is checked against ``num_classes`` and each image
given one."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ArgumentError, ArgumentValueError, SchemaError
from .checks import integer, number
from .kernels import load

__all__ = ["BatchTransform", "CutMix", "MixUp", "indexed_transform"]


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

    dims = 1  # the fewest dimensions of an image batch
    shape = "(B, ...)"

    def __post_init__(self) -> None:
        op = type(self).__name__
        integer(op, "num_classes", self.num_classes, 1, 2**31 - 1)
        number(op, "alpha", self.alpha, 0.0, above=True)
        for name in ("image", "label"):
            if not isinstance(getattr(self, name), str):
                raise ArgumentError(
                    f"{op}: {name} must be a field name, got {getattr(self, name)!r}"
                )
        if self.image == self.label:
            raise ArgumentValueError(f"{op}: image and label are one field, {self.image!r}")

    def _no_mask(self, batch: Mapping[str, Any], img: torch.Tensor) -> None:
        """Refuse a batch with a mask of the images (an integer ``(B, H, W)`` tensor, e.g. a
        ``chute.Follow`` field): mixing moves image pixels it would leave behind
        (torchvision v2's MixUp and CutMix refuse masks too)."""
        if img.dim() != 4:
            return
        for k, v in batch.items():
            if (
                k != self.image
                and isinstance(v, torch.Tensor)
                and tuple(v.shape) == (len(img), *img.shape[-2:])
                and not (v.dtype.is_floating_point or v.dtype.is_complex)
            ):
                op = type(self).__name__
                raise ArgumentError(
                    f"{op}: field {k!r} {tuple(v.shape)} is a mask of the images in "
                    f"{self.image!r}; {op} mixes images and labels only and would leave it "
                    "behind (torchvision v2 refuses masks too): drop the transform or the field"
                )

    def _parts(
        self, batch: Mapping[str, Any], indices: np.ndarray, seed: int, epoch: int
    ) -> tuple[torch.Tensor, torch.Tensor, np.random.Generator]:
        """The batch's images, its labels as float32 one-hot rows (each class index checked
        against ``num_classes``) and the batch's generator."""
        op = type(self).__name__
        for k in (self.image, self.label):
            if k not in batch:
                raise SchemaError(f"{op}: the batch has no field {k!r}")
        img, lab = batch[self.image], batch[self.label]
        if not isinstance(img, torch.Tensor) or img.dim() < self.dims:
            got = tuple(img.shape) if isinstance(img, torch.Tensor) else type(img).__name__
            raise SchemaError(
                f"{op}: field {self.image!r} must be a tensor of images with at least "
                f"{self.dims} dimensions {self.shape}, got {got}"
            )
        self._no_mask(batch, img)
        lab = torch.as_tensor(lab).reshape(-1)
        if lab.dtype.is_floating_point or lab.dtype.is_complex or lab.dtype == torch.bool:
            raise SchemaError(
                f"{op}: field {self.label!r} must hold integer class indices, got {lab.dtype}"
            )
        idx = np.asarray(indices).reshape(-1)
        if not len(lab) == len(img) == len(idx):
            raise SchemaError(
                f"{op}: {len(lab)} labels (field {self.label!r}) and {len(idx)} indices for "
                f"{len(img)} images (field {self.image!r}); each image needs one class index"
            )
        if len(lab):
            bad = torch.nonzero((lab < 0) | (lab >= self.num_classes)).reshape(-1)
            if len(bad):
                at = int(bad[0])
                raise SchemaError(
                    f"{op}: label {int(lab[at])} of sample {int(idx[at])} (field {self.label!r}) "
                    f"is outside [0, {self.num_classes}): num_classes={self.num_classes}"
                )
        first = int(idx[0]) if len(idx) else 0
        rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, first, 0x4D495855])
        onehot = F.one_hot(lab.long(), self.num_classes).float()
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
    compiled pass (:mod:`chute.image.kernels.mixup`), another dtype or device by torch."""
    if img.dtype != torch.uint8 or img.device.type != "cpu":
        return (img.float() * lam + img.roll(1, 0).float() * (1 - lam)).round_().to(img.dtype)
    src = img.contiguous()
    mixed = torch.empty_like(src)
    load("mixup").mix(src.numpy(), lam, mixed.numpy())
    return mixed


class CutMix(_Mixing):
    """torchvision's ``CutMix``: a box of ``1 - lam`` of the area (``lam ~ Beta(alpha,
    alpha)`` per batch, centre uniform, clipped) pasted from the next image of the batch;
    labels mixed by the area actually pasted (float32 one-hot ``(B, num_classes)``). Images
    ``(B, ..., H, W)``."""

    dims, shape = 3, "(B, ..., H, W)"

    def apply(self, batch: dict[str, Any], indices: np.ndarray, seed: int, epoch: int) -> Any:
        img, onehot, rng = self._parts(batch, indices, seed, epoch)
        if img.numel() == 0:  # no pixel to paste: the labels as they are
            return {**batch, self.label: onehot}
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
