"""Decode ops: what an image field becomes in a batch, as frozen dataclasses with torchvision's
semantics, and :func:`plan`, which turns them into crop boxes and flips BEFORE decoding.

A plan needs only the stored ``(height, width)`` of each image; :mod:`chute.image.batch_decode` then
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..errors import ArgumentError
from .augment import AUGMENTS
from .checks import check_exact, number, pair, probability, size2
from .draws import uniforms
from .placing import (
    RandomCrop,
    RandomIoUCrop,
    ResizePad,
    ScaleJitter,
    ZoomOut,
    fill_colour,
)

__all__ = [
    "DECODE_OPS",
    "MOVES",
    "CenterCrop",
    "DecodeOp",
    "Plan",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "padded",
    "placed",
    "plan",
    "uniforms",
]


class Plan(NamedTuple):
    """What to do with each image of a batch. ``boxes``: (B, 4) float64 ``(left, top, right,
    bottom)`` in stored pixels (PIL's ``box=`` order; may be fractional): what the output
    frame shows, which may reach past the image (padding); ``flips``: (B,) bool, mirror
    left-right after resizing; ``size``: the output ``(height, width)``; ``exact``: decode at
    full size (no DCT scaling), see the geometric ops' ``exact``; ``inner``: (B, 4) the part
    of the image the frame shows (``boxes`` clipped to the image and to every crop on the
    way; None: ``boxes`` itself, no padding); ``fill``: the RGB of the padding."""

    boxes: np.ndarray
    flips: np.ndarray
    size: tuple[int, int]
    exact: bool = False
    inner: np.ndarray | None = None
    fill: tuple[int, int, int] = (0, 0, 0)


@runtime_checkable
class DecodeOp(Protocol):
    """One step of an image field's decode pipeline. A geometric op has ``size`` and
    ``boxes(heights, widths, u)``; a flip has ``flips(u)``. ``draws`` is how many uniforms
    per sample it takes from its own stream."""

    draws: int


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
        size2(self.size, "RandomResizedCrop")
        pair("RandomResizedCrop", "scale", self.scale)
        pair("RandomResizedCrop", "ratio", self.ratio)
        check_exact("RandomResizedCrop", self.exact)

    @property
    def out_size(self) -> tuple[int, int]:
        return size2(self.size, "RandomResizedCrop")

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
    A crop larger than the resized image is padded with zeros, as v2's ``CenterCrop``.
    ``device``, ``exact``: as for :class:`RandomResizedCrop`."""

    size: int | tuple[int, int]
    ratio: float = 224 / 256
    device: str | None = None
    exact: bool = False
    draws = 0
    moves = "plan"

    def __post_init__(self) -> None:
        size2(self.size, "CenterCrop")
        number("CenterCrop", "ratio", self.ratio, 0.0, 1.0, above=True)
        check_exact("CenterCrop", self.exact)

    @property
    def out_size(self) -> tuple[int, int]:
        return size2(self.size, "CenterCrop")

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
        # torchvision CenterCrop: int(round((resized - crop) / 2)); a crop larger than the
        # resized image pads it with zeros first, (crop - side) // 2 before it.
        top = np.where(rh < oh, -((oh - rh) // 2), np.round((rh - oh) / 2.0))
        left = np.where(rw < ow, -((ow - rw) // 2), np.round((rw - ow) / 2.0))
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
        size2(self.size, "Resize")
        check_exact("Resize", self.exact)

    @property
    def out_size(self) -> tuple[int, int]:
        return size2(self.size, "Resize")

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


_GEOMETRIC = (RandomResizedCrop, CenterCrop, Resize, RandomCrop, ResizePad, ScaleJitter)
_FRAMES = (ZoomOut, RandomIoUCrop)  # give the next geometric op a frame of their own

DECODE_OPS: tuple[type, ...] = (*_GEOMETRIC, *_FRAMES, RandomHorizontalFlip, *AUGMENTS)
"""Every op class a ``decode=`` list takes. Each says, as its ``moves``, how the fields that
follow its image (:mod:`chute.image.follow`) move with it: ``"plan"``, through the planned
crop, padding, resize and flip; ``"warp"``, by its own warps after decoding (``rounds`` names
them per sample); ``"none"``, it moves no pixel (colour, blur, erasing)."""

MOVES = ("plan", "warp", "none")
"""The values of an op's ``moves`` (see :data:`DECODE_OPS`)."""


def check_ops(ops: Any) -> tuple[Any, ...]:
    """``ops`` as a tuple (one op may be given alone), checked: frame ops
    (:class:`~chute.image.placing.ZoomOut`, :class:`~chute.image.placing.RandomIoUCrop`), then
    one sizing op, flips, and the augmentations of :mod:`chute.image.augment` (applied after
    decoding); the ops that pad agree on the fill."""
    ops = tuple(ops) if isinstance(ops, (list, tuple)) else (ops,)
    geo = [op for op in ops if isinstance(op, _GEOMETRIC)]
    other = [op for op in ops if not isinstance(op, DECODE_OPS)]
    if other:
        raise ArgumentError(f"not an image decode op: {other[0]!r}")
    if len(geo) != 1:
        raise ArgumentError(
            "image decode ops need exactly one of RandomResizedCrop, CenterCrop, Resize, "
            "RandomCrop, ResizePad, ScaleJitter (it fixes the batch's image size), got "
            f"{len(geo)} in {ops!r}"
        )
    late = [op for op in ops[ops.index(geo[0]) :] if isinstance(op, _FRAMES)]
    if late:
        raise ArgumentError(
            f"{type(late[0]).__name__} must come before {type(geo[0]).__name__} (the op that "
            f"fixes the batch's image size), got {ops!r}"
        )
    fills = {
        fill_colour(type(op).__name__, op.fill)
        for op in ops
        if isinstance(op, (*_GEOMETRIC, *_FRAMES)) and hasattr(op, "fill")
    }
    if len(fills) > 1:
        raise ArgumentError(f"the ops that pad the image must have one fill, got {sorted(fills)}")
    return ops


def _boxes_in(targets: Any, op: Any, n: int) -> list[np.ndarray]:
    """Each sample's boxes (K, 4) xyxy for ``op`` (its ``boxes`` field) from ``targets``."""
    got = None if targets is None else targets.get(op.boxes)
    if got is None or len(got) != n:
        raise ArgumentError(
            f"{type(op).__name__}: needs each sample's boxes, from field {op.boxes!r}; the "
            "decode step was given none (name the dataset's ragged (K, 4) boxes field with "
            f"boxes=, or pass targets={{{op.boxes!r}: per-sample boxes}} to plan)"
        )
    boxes = []
    for j, b in enumerate(got):
        arr = np.asarray(b, dtype=np.float64)
        if arr.size % 4:
            raise ArgumentError(
                f"{type(op).__name__}: field {op.boxes!r} of row {j} of the batch holds "
                f"{arr.size} numbers, not boxes of 4 (x1, y1, x2, y2)"
            )
        boxes.append(arr.reshape(-1, 4))
    return boxes


def plan(
    ops: Sequence[Any] | Any,
    heights: Any,
    widths: Any,
    indices: Any,
    seed: int = 0,
    epoch: int = 0,
    targets: Mapping[str, Sequence[Any]] | None = None,
) -> Plan:
    """Plan crop boxes and flips for a batch from the stored sizes, before any decoding.

    ``indices`` are the samples' indices in the dataset (their random draws depend on them,
    not on their position in the batch). Op ``k`` of ``ops`` draws from stream ``k``. The
    geometric ops compose: each one's box, in the frame the ops before it made, becomes a box
    in stored pixels; ``targets`` maps a field name to each sample's boxes (in stored pixels,
    xyxy), for :class:`~chute.image.placing.RandomIoUCrop`.
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
    n = len(heights)
    whole = np.stack([np.zeros(n), np.zeros(n), widths, heights], axis=1).astype(np.float64)
    boxes, inner = whole.copy(), whole.copy()
    fh, fw = heights, widths  # the current frame's size, per sample
    flips = np.zeros(n, dtype=bool)
    size, exact, fill = (0, 0), False, (0, 0, 0)
    nh: Any
    nw: Any
    for k, op in enumerate(ops):
        if isinstance(op, (*_GEOMETRIC, *_FRAMES)) and hasattr(op, "fill"):
            fill = fill_colour(type(op).__name__, op.fill)
        if isinstance(op, RandomHorizontalFlip):
            flips ^= op.flips(uniforms(seed, epoch, indices, k, op.draws))
            continue
        if isinstance(op, _FRAMES):
            sx, sy = (boxes[:, 2] - boxes[:, 0]) / fw, (boxes[:, 3] - boxes[:, 1]) / fh
            own = None
            if isinstance(op, RandomIoUCrop):  # the sample's boxes in the current frame
                own = [
                    (b - boxes[j, [0, 1, 0, 1]]) / [sx[j], sy[j], sx[j], sy[j]]
                    for j, b in enumerate(_boxes_in(targets, op, n))
                ]

            def draw(start: int, cols: int, rows: Any, k: int = k) -> np.ndarray:
                idx = indices if rows is None else indices[rows]
                return uniforms(seed, epoch, idx, k, cols, start)

            box, nh, nw = op.frame(fh, fw, draw, own)
        elif isinstance(op, _GEOMETRIC):
            u = uniforms(seed, epoch, indices, k, op.draws) if op.draws else np.empty((n, 0))
            box = op.boxes(fh, fw, u)
            size, exact = op.out_size, bool(op.exact)
            nh, nw = size
        else:
            continue  # an augmentation, applied after decoding (chute.image.augment)
        sx, sy = (boxes[:, 2] - boxes[:, 0]) / fw, (boxes[:, 3] - boxes[:, 1]) / fh
        boxes = boxes[:, [0, 1, 0, 1]] + box * np.stack([sx, sy, sx, sy], axis=1)
        inner[:, :2] = np.maximum(inner[:, :2], boxes[:, :2])
        inner[:, 2:] = np.maximum(np.minimum(inner[:, 2:], boxes[:, 2:]), inner[:, :2])
        fh, fw = np.broadcast_to(nh, (n,)), np.broadcast_to(nw, (n,))
    padded = (np.abs(inner - boxes) > 1e-9).any()
    return Plan(boxes, flips, size, exact, inner if padded else None, fill)


def placed(p: Plan) -> np.ndarray:
    """(B, 4) int64 ``(x0, y0, x1, y1)``: the output pixels of plan ``p`` that show the image,
    those whose centre maps inside ``p.inner`` (before any flip); the others are padding.
    Shared by the image and its followers, so both pad exactly the same pixels."""
    oh, ow = p.size
    inner = p.boxes if p.inner is None else p.inner
    sx = ow / (p.boxes[:, 2] - p.boxes[:, 0])
    sy = oh / (p.boxes[:, 3] - p.boxes[:, 1])
    scale = np.stack([sx, sy, sx, sy], axis=1)
    edges = np.ceil((inner - p.boxes[:, [0, 1, 0, 1]]) * scale - 0.5 - 1e-9)
    edges = np.clip(edges, 0, [ow, oh, ow, oh]).astype(np.int64)
    edges[:, 2:] = np.maximum(edges[:, 2:], edges[:, :2])
    return edges


def padded(p: Plan) -> np.ndarray:
    """(B,) bool: the samples of plan ``p`` whose output has padding."""
    if p.inner is None:
        return np.zeros(len(p.boxes), bool)
    return (np.abs(p.inner - p.boxes) > 1e-9).any(axis=1)
