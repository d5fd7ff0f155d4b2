"""Decode ops: what an image field becomes in a batch, as frozen dataclasses with torchvision's
semantics, and :func:`plan`, which turns them into crop boxes and flips BEFORE decoding.

A plan needs only the stored ``(height, width)`` of each image; :mod:`chute.image.decode` then
decodes each image at the smallest DCT scale that still covers its box at the output size.

Every random choice is a pure function of ``(seed, epoch, sample index, op position, draw)``:
a counter-based hash (splitmix64 finalizer over those five numbers), computed for a whole
batch at once in numpy. So the same run gives the same pixels, a resumed run continues with
exactly the augmentations it would have seen, and a batch split across threads (or samples
gathered in any order) gets the same crops as one call for the whole batch.

Exactly one geometric op (:class:`RandomResizedCrop`, :class:`CenterCrop`, :class:`Resize`)
fixes the output size; :class:`RandomHorizontalFlip` may be added, and the augmentations of
:mod:`chute.image.augment`, which a plan skips (they run on the decoded batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..errors import ArgumentError
from .augment import AUGMENTS
from .checks import number, pair, probability
from .draws import uniforms

__all__ = [
    "DECODE_OPS",
    "MOVES",
    "CenterCrop",
    "DecodeOp",
    "Plan",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "plan",
    "uniforms",
]


class Plan(NamedTuple):
    """What to do with each image of a batch. ``boxes``: (B, 4) float64 ``(left, top, right,
    bottom)`` in stored pixels (PIL's ``box=`` order; may be fractional); ``flips``: (B,) bool,
    mirror left-right after resizing; ``size``: the output ``(height, width)``; ``exact``:
    decode at full size (no DCT scaling), see the geometric ops' ``exact``."""

    boxes: np.ndarray
    flips: np.ndarray
    size: tuple[int, int]
    exact: bool = False


@runtime_checkable
class DecodeOp(Protocol):
    """One step of an image field's decode pipeline. A geometric op has ``size`` and
    ``boxes(heights, widths, u)``; a flip has ``flips(u)``. ``draws`` is how many uniforms
    per sample it takes from its own stream."""

    draws: int


def _size2(size: Any, name: str) -> tuple[int, int]:
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return (size, size)
    if (
        isinstance(size, (tuple, list))
        and len(size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        return (int(size[0]), int(size[1]))
    raise ArgumentError(f"{name}: size must be a positive int or (height, width), got {size!r}")


def _check_exact(name: str, exact: Any) -> None:
    if not isinstance(exact, bool):
        raise ArgumentError(f"{name}: exact must be True or False, got {exact!r}")


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop``: a crop of random area (``scale`` of the image) and
    aspect ratio (log-uniform in ``ratio``), resized to ``size`` (bilinear, antialiased); 10
    tries, then the central crop clamped to ``ratio``. ``device``: decode on that device
    instead of in the loader's workers (see :mod:`chute.image.on_device`). ``exact``: decode
    every image at full size, then crop + resize, as torchvision does, instead of at the
    smallest DCT scale that covers the crop (``docs/vision.md`` gives the measured
    difference); the CPU path only."""

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    device: str | None = None
    exact: bool = False
    draws = 40  # 10 tries x (area, log-ratio, top, left)
    moves = "plan"  # see DECODE_OPS

    def __post_init__(self) -> None:
        _size2(self.size, "RandomResizedCrop")
        pair("RandomResizedCrop", "scale", self.scale)
        pair("RandomResizedCrop", "ratio", self.ratio)
        _check_exact("RandomResizedCrop", self.exact)

    @property
    def out_size(self) -> tuple[int, int]:
        return _size2(self.size, "RandomResizedCrop")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        h_img = heights.astype(np.float64)[:, None]
        w_img = widths.astype(np.float64)[:, None]
        u = u.reshape(len(heights), 10, 4)
        area = h_img * w_img * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[..., 0])
        lr0, lr1 = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = np.exp(lr0 + (lr1 - lr0) * u[..., 1])
        w = np.round(np.sqrt(area * aspect))  # numpy and python both round half to even
        h = np.round(np.sqrt(area / aspect))
        ok = (w > 0) & (w <= w_img) & (h > 0) & (h <= h_img)
        first = np.argmax(ok, axis=1)
        rows = np.arange(len(heights))
        w, h, uu = w[rows, first], h[rows, first], u[rows, first]
        top = np.floor(uu[:, 2] * (heights - h + 1))
        left = np.floor(uu[:, 3] * (widths - w + 1))
        # No try fits: torchvision's fallback, the central crop clamped to ``ratio``.
        fb = ~ok.any(axis=1)
        if fb.any():
            hh, ww = heights[fb].astype(np.float64), widths[fb].astype(np.float64)
            in_ratio = ww / hh
            fw = np.where(in_ratio < self.ratio[0], ww, np.where(in_ratio > self.ratio[1], 0, ww))
            fh = np.where(in_ratio < self.ratio[0], np.round(ww / self.ratio[0]), hh)
            fw = np.where(in_ratio > self.ratio[1], np.round(hh * self.ratio[1]), fw)
            w[fb], h[fb] = fw, fh
            top[fb] = (hh - fh) // 2
            left[fb] = (ww - fw) // 2
        return np.stack([left, top, left + w, top + h], axis=1)


@dataclass(frozen=True)
class CenterCrop:
    """Evaluation crop: resize so the shorter side is ``int(size / ratio)`` (torchvision's
    ``Resize(int(size / ratio))``), then take the central ``size``; planned as one box in stored
    pixels with the scales torchvision's two steps give. ``ratio=1`` crops the central square.
    ``device``, ``exact``: as for :class:`RandomResizedCrop`."""

    size: int | tuple[int, int]
    ratio: float = 224 / 256
    device: str | None = None
    exact: bool = False
    draws = 0
    moves = "plan"

    def __post_init__(self) -> None:
        _size2(self.size, "CenterCrop")
        number("CenterCrop", "ratio", self.ratio, 0.0, 1.0, above=True)
        _check_exact("CenterCrop", self.exact)

    @property
    def out_size(self) -> tuple[int, int]:
        return _size2(self.size, "CenterCrop")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        oh, ow = self.out_size
        short = int(min(oh, ow) / self.ratio)
        h, w = heights.astype(np.float64), widths.astype(np.float64)
        # torchvision Resize(int): the shorter side becomes ``short``, the longer one
        # int(short * long / short_side) (truncated).
        tall = h > w
        rh = np.where(tall, np.floor(short * h / w), short)
        rw = np.where(tall, short, np.floor(short * w / h))
        sy, sx = h / rh, w / rw  # stored pixels per resized pixel
        # torchvision CenterCrop: int(round((resized - crop) / 2)), padding if too small
        # (not reproduced: the box then reaches past the image and is clamped by the resize).
        top = np.round((rh - oh) / 2.0)
        left = np.round((rw - ow) / 2.0)
        return np.stack([left * sx, top * sy, (left + ow) * sx, (top + oh) * sy], axis=1)


@dataclass(frozen=True)
class Resize:
    """Resize the whole image to ``size`` (an int gives a square). Unlike torchvision's
    ``Resize(int)``, which keeps the aspect ratio and so gives images of different sizes, this
    fills a batch of one shape; use :class:`CenterCrop` to keep the aspect ratio. ``device``,
    ``exact``: as for :class:`RandomResizedCrop`."""

    size: int | tuple[int, int]
    device: str | None = None
    exact: bool = False
    draws = 0
    moves = "plan"

    def __post_init__(self) -> None:
        _size2(self.size, "Resize")
        _check_exact("Resize", self.exact)

    @property
    def out_size(self) -> tuple[int, int]:
        return _size2(self.size, "Resize")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        z = np.zeros(len(heights))
        return np.stack([z, z, widths.astype(np.float64), heights.astype(np.float64)], axis=1)


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirror left-right with probability ``p`` (torchvision's ``RandomHorizontalFlip``)."""

    p: float = 0.5
    draws = 1
    moves = "plan"

    def __post_init__(self) -> None:
        probability("RandomHorizontalFlip", "p", self.p)

    def flips(self, u: np.ndarray) -> np.ndarray:
        return u[:, 0] < self.p


_GEOMETRIC = (RandomResizedCrop, CenterCrop, Resize)

DECODE_OPS: tuple[type, ...] = (*_GEOMETRIC, RandomHorizontalFlip, *AUGMENTS)
"""Every op class a ``decode=`` list takes. Each says, as its ``moves``, how the fields that
follow its image (:mod:`chute.image.follow`) move with it: ``"plan"``, through the planned
crop, resize and flip; ``"warp"``, by its own warps after decoding (``rounds`` names them per
sample); ``"none"``, it moves no pixel (colour, blur, erasing)."""

MOVES = ("plan", "warp", "none")
"""The values of an op's ``moves`` (see :data:`DECODE_OPS`)."""


def check_ops(ops: Any) -> tuple[Any, ...]:
    """``ops`` as a tuple (one op may be given alone), checked: one geometric op, flips, and
    the augmentations of :mod:`chute.image.augment` (applied after decoding)."""
    ops = tuple(ops) if isinstance(ops, (list, tuple)) else (ops,)
    geo = [op for op in ops if isinstance(op, _GEOMETRIC)]
    other = [op for op in ops if not isinstance(op, DECODE_OPS)]
    if other:
        raise ArgumentError(f"not an image decode op: {other[0]!r}")
    if len(geo) != 1:
        raise ArgumentError(
            "image decode ops need exactly one of RandomResizedCrop, CenterCrop, Resize (it "
            f"fixes the batch's image size), got {len(geo)} in {ops!r}"
        )
    return ops


def plan(
    ops: Sequence[Any] | Any,
    heights: Any,
    widths: Any,
    indices: Any,
    seed: int = 0,
    epoch: int = 0,
) -> Plan:
    """Plan crop boxes and flips for a batch from the stored sizes, before any decoding.

    ``indices`` are the samples' indices in the dataset (their random draws depend on them,
    not on their position in the batch). Op ``k`` of ``ops`` draws from stream ``k``.
    """
    ops = check_ops(ops)
    heights = np.asarray(heights, dtype=np.int64).reshape(-1)
    widths = np.asarray(widths, dtype=np.int64).reshape(-1)
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    if not len(heights) == len(widths) == len(indices):
        raise ArgumentError(
            f"heights, widths and indices differ in length: "
            f"{len(heights)}, {len(widths)}, {len(indices)}"
        )
    if len(heights) and (heights.min() < 1 or widths.min() < 1):
        raise ArgumentError("image heights and widths must be >= 1")
    boxes = np.zeros((len(heights), 4))
    flips = np.zeros(len(heights), dtype=bool)
    size, exact = (0, 0), False
    for k, op in enumerate(ops):
        if not isinstance(op, (*_GEOMETRIC, RandomHorizontalFlip)):
            continue  # an augmentation, applied after decoding (chute.image.augment)
        u = uniforms(seed, epoch, indices, k, op.draws) if op.draws else np.empty((len(indices), 0))
        if isinstance(op, RandomHorizontalFlip):
            flips ^= op.flips(u)
        else:
            boxes = op.boxes(heights, widths, u)
            size, exact = op.out_size, bool(op.exact)
    return Plan(boxes, flips, size, exact)
