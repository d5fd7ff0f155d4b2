"""Geometric decode ops for detection and segmentation recipes: the image placed in a frame
larger than itself (padding with a fill colour), scaled by a random factor, or cropped around
its objects.

Sizing ops (each fixes the batch's image size, like :class:`chute.RandomResizedCrop`):
:class:`RandomCrop` (``padding=``, ``pad_if_needed=``: the CIFAR recipe), :class:`ResizePad`
(aspect-keeping resize, then pad to a fixed size), :class:`ScaleJitter` (large-scale jitter:
resize by a random factor, then crop or pad to the size). Frame ops (placed before the sizing
op, each gives the next op a frame of its own size per sample): :class:`ZoomOut` (the image
on a larger canvas) and :class:`RandomIoUCrop` (SSD's crop, drawn against the sample's boxes).

Each op says where its output frame lies in its input frame: a box ``(left, top, right,
bottom)`` that may reach past the image; what lies outside the image is padding, ``fill``.
:func:`chute.image.plan` composes them into one box in stored pixels and the part of the
image it shows (``Plan.boxes``, ``Plan.inner``), so a padded image is still decoded once and
every follower (masks, instance masks, ``Geometry``'s boxes and keypoints) moves through the
same plan. Random draws are, as for every op, a pure function of (seed, epoch, sample index,
op position).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, ArgumentValueError
from .checks import integer, number, pair, probability, size2

__all__ = ["RandomCrop", "RandomIoUCrop", "ResizePad", "ScaleJitter", "ZoomOut", "fill_colour"]

# (start, k, rows) -> (B, k) uniforms of the op's stream, or (len(rows), k): those rows' only
Draw = Callable[[int, int, Any], np.ndarray]


def fill_colour(op: str, fill: Any) -> tuple[int, int, int]:
    """``fill`` (one level or an RGB triple of levels in [0, 255]) as an RGB triple."""
    levels = fill if isinstance(fill, (tuple, list)) else (fill, fill, fill)
    ok = len(levels) == 3 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v <= 255
        for v in levels
    )
    if not ok:
        raise ArgumentError(
            f"{op}: fill must be a level in [0, 255] or an (r, g, b) triple of them (e.g. the "
            f"dataset's mean colour), got {fill!r}"
        )
    return (int(levels[0]), int(levels[1]), int(levels[2]))


def _padding(padding: Any) -> tuple[int, int, int, int]:
    """torchvision's ``padding``: one int for every side, ``(left/right, top/bottom)`` or
    ``(left, top, right, bottom)``, as ``(left, top, right, bottom)``."""
    vals = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,)
    if len(vals) not in (1, 2, 4) or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in vals
    ):
        raise ArgumentError(
            "RandomCrop: padding must be an int >= 0, (left/right, top/bottom) or (left, top, "
            f"right, bottom), got {padding!r}"
        )
    if len(vals) == 1:
        return (int(vals[0]),) * 4  # type: ignore[return-value]
    if len(vals) == 2:
        return (int(vals[0]), int(vals[1]), int(vals[0]), int(vals[1]))
    return (int(vals[0]), int(vals[1]), int(vals[2]), int(vals[3]))


@dataclass(frozen=True)
class RandomCrop:
    """torchvision's ``RandomCrop(size, padding, pad_if_needed, fill)``: pad the image by
    ``padding`` (``fill`` colour), and, with ``pad_if_needed``, on both sides by what it still
    lacks of ``size``; then crop ``size`` at a uniform offset (top, left: ``floor(u * (room +
    1))``). CIFAR: ``RandomCrop(32, padding=4)``. An image smaller than ``size`` without
    ``pad_if_needed`` is an :class:`~chute.ArgumentValueError`, as v2's ``ValueError``."""

    size: int | tuple[int, int]
    padding: int | Sequence[int] = 0
    pad_if_needed: bool = False
    fill: int | tuple[int, int, int] = 0
    exact: bool = False
    draws = 2
    moves = "plan"  # see chute.image.ops.DECODE_OPS
    device = None

    def __post_init__(self) -> None:
        size2(self.size, "RandomCrop")
        _padding(self.padding)
        fill_colour("RandomCrop", self.fill)
        if not isinstance(self.pad_if_needed, bool):
            raise ArgumentError(
                f"RandomCrop: pad_if_needed must be a bool, got {self.pad_if_needed!r}"
            )

    @property
    def out_size(self) -> tuple[int, int]:
        return size2(self.size, "RandomCrop")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        oh, ow = self.out_size
        pl, pt, pr, pb = _padding(self.padding)
        ph, pw = heights + pt + pb, widths + pl + pr
        if self.pad_if_needed:  # v2 pads both sides by the whole shortfall
            pt = pt + np.maximum(oh - ph, 0)
            pl = pl + np.maximum(ow - pw, 0)
            ph, pw = np.maximum(ph, ph + 2 * (oh - ph)), np.maximum(pw, pw + 2 * (ow - pw))
        small = (ph < oh) | (pw < ow)
        if small.any():
            j = int(np.flatnonzero(small)[0])
            raise ArgumentValueError(
                f"RandomCrop({self.size!r}): an image of {int(heights[j])}x{int(widths[j])} "
                f"(row {j} of the batch), padded by {self.padding!r}, is smaller than the crop; "
                "pass pad_if_needed=True or more padding"
            )
        top = np.floor(u[:, 0] * (ph - oh + 1)) - pt
        left = np.floor(u[:, 1] * (pw - ow + 1)) - pl
        return np.stack([left, top, left + ow, top + oh], axis=1).astype(np.float64)


def _fit(h: np.ndarray, w: np.ndarray, oh: int, ow: int) -> tuple[np.ndarray, np.ndarray]:
    """The size of ``(h, w)`` resized to fit ``(oh, ow)``, keeping its aspect ratio: the
    limiting side at the size, the other truncated (v2's ``Resize(None, max_size=L)`` for a
    square)."""
    tall = h * ow >= w * oh
    nh = np.where(tall, oh, np.floor(ow * h / w))
    nw = np.where(tall, np.floor(oh * w / h), ow)
    return np.maximum(nh, 1), np.maximum(nw, 1)


def _box(
    h: np.ndarray, w: np.ndarray, nh: Any, nw: Any, top: Any, left: Any, oh: int, ow: int
) -> np.ndarray:
    """The frame box of an image of ``(h, w)`` resized to ``(nh, nw)`` whose output window
    starts at ``(top, left)`` in resized pixels (negative: padding before the image)."""
    sy, sx = h / nh, w / nw  # input pixels per resized pixel
    return np.stack([left * sx, top * sy, (left + ow) * sx, (top + oh) * sy], axis=1)


@dataclass(frozen=True)
class ResizePad:
    """Aspect-keeping resize, then pad to ``size``: the image scaled so that it fits (the
    longest side to the size's, the other ``int(L * short / long)``, v2's ``Resize(None,
    max_size=L)``), or, with ``shorter=S``, so that its shorter side is ``S`` (the longer
    ``int(S * long / short)``, v2's ``Resize(S)``), scaled down to fit when that is too
    large; then padded with ``fill`` to ``size``: at the bottom and right (Detectron,
    mmdetection), or on both sides with ``center=True`` (YOLO's letterbox)."""

    size: int | tuple[int, int]
    shorter: int | None = None
    center: bool = False
    fill: int | tuple[int, int, int] = 0
    exact: bool = False
    draws = 0
    moves = "plan"
    device = None

    def __post_init__(self) -> None:
        size2(self.size, "ResizePad")
        fill_colour("ResizePad", self.fill)
        if self.shorter is not None:
            integer("ResizePad", "shorter", self.shorter, 1, 1 << 20)
        if not isinstance(self.center, bool):
            raise ArgumentError(f"ResizePad: center must be a bool, got {self.center!r}")

    @property
    def out_size(self) -> tuple[int, int]:
        return size2(self.size, "ResizePad")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        oh, ow = self.out_size
        h, w = heights.astype(np.float64), widths.astype(np.float64)
        nh, nw = _fit(h, w, oh, ow)
        if self.shorter is not None:
            s = float(self.shorter)
            sh = np.where(h <= w, s, np.floor(s * h / w))
            sw = np.where(h <= w, np.floor(s * w / h), s)
            fits = (sh <= oh) & (sw <= ow)
            nh, nw = np.where(fits, sh, nh), np.where(fits, sw, nw)
        top = -((oh - nh) // 2) if self.center else np.zeros_like(nh)
        left = -((ow - nw) // 2) if self.center else np.zeros_like(nw)
        return _box(h, w, nh, nw, top, left, oh, ow)


@dataclass(frozen=True)
class ScaleJitter:
    """Large-scale jitter (LSJ, Copy-Paste / ViTDet): v2's ``ScaleJitter(size, scale)``, the
    image resized by ``r * min(H / h, W / w)`` with ``r`` uniform in ``scale`` (sides
    truncated), then cropped to ``size`` at a uniform offset where larger and padded with
    ``fill`` at the bottom and right where smaller (Detectron2's / torchvision's detection
    reference ``FixedSizeCrop``; the top and left offsets draw one number each)."""

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.1, 2.0)
    fill: int | tuple[int, int, int] = 0
    exact: bool = False
    draws = 3
    moves = "plan"
    device = None

    def __post_init__(self) -> None:
        size2(self.size, "ScaleJitter")
        pair("ScaleJitter", "scale", self.scale)
        if self.scale[0] <= 0:
            raise ArgumentValueError(f"ScaleJitter: scale must be > 0, got {self.scale!r}")
        fill_colour("ScaleJitter", self.fill)

    @property
    def out_size(self) -> tuple[int, int]:
        return size2(self.size, "ScaleJitter")

    def boxes(self, heights: np.ndarray, widths: np.ndarray, u: np.ndarray) -> np.ndarray:
        oh, ow = self.out_size
        h, w = heights.astype(np.float64), widths.astype(np.float64)
        r = self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, 0]
        s = np.minimum(oh / h, ow / w) * r
        nh, nw = np.maximum(np.floor(h * s), 1), np.maximum(np.floor(w * s), 1)
        top = np.floor(np.maximum(nh - oh, 0) * u[:, 1])
        left = np.floor(np.maximum(nw - ow, 0) * u[:, 2])
        return _box(h, w, nh, nw, top, left, oh, ow)


@dataclass(frozen=True)
class ZoomOut:
    """v2's ``ZoomOut(fill, side_range, p)`` (SSD): with probability ``p``, the image placed
    on a canvas ``int(side * r)`` per side (``r`` uniform in ``side_range``) filled with
    ``fill`` (the dataset's mean colour, say), at offsets ``int((canvas - side) * u)``. A
    frame op: the sizing op after it (e.g. :class:`chute.Resize`) sees the canvas."""

    side_range: tuple[float, float] = (1.0, 4.0)
    p: float = 0.5
    fill: int | tuple[int, int, int] = 0
    draws = 4
    moves = "plan"

    def __post_init__(self) -> None:
        pair("ZoomOut", "side_range", self.side_range)
        if self.side_range[0] < 1.0:
            raise ArgumentValueError(f"ZoomOut: side_range must be >= 1, got {self.side_range!r}")
        probability("ZoomOut", "p", self.p)
        fill_colour("ZoomOut", self.fill)

    def frame(
        self, heights: np.ndarray, widths: np.ndarray, draw: Draw, targets: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = draw(0, self.draws, None)
        lo, hi = self.side_range
        r = np.where(u[:, 0] < self.p, lo + (hi - lo) * u[:, 1], 1.0)
        cw, ch = np.floor(widths * r), np.floor(heights * r)
        left, top = np.floor((cw - widths) * u[:, 2]), np.floor((ch - heights) * u[:, 3])
        box = np.stack([-left, -top, cw - left, ch - top], axis=1).astype(np.float64)
        return box, ch.astype(np.int64), cw.astype(np.int64)


_OPTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
ROUNDS = 100  # RandomIoUCrop's rounds at most (v2 loops until one succeeds)


@dataclass(frozen=True)
class RandomIoUCrop:
    """v2's ``RandomIoUCrop`` (SSD): per round, a minimum IoU drawn from
    ``sampler_options`` (1.0 or more: no crop), then up to ``trials`` crops of ``int(side *
    r)`` per side (``r`` uniform in ``[min_scale, max_scale]``, aspect in ``[min_aspect_ratio,
    max_aspect_ratio]``) at offsets ``int((side - crop) * u)``; the first crop that holds the
    centre of a box and overlaps one such box by the IoU is taken. v2 draws rounds until one
    succeeds; here at most 100 (then no crop; with the default options the odds of reaching
    that are under 1e-6). ``boxes``: the dataset field holding each sample's boxes, ``(K,
    4)`` xyxy in stored pixels (a ragged field), read in the decode step. v2 also drops the
    boxes whose centre falls outside the crop: :func:`chute.transform_boxes` with
    ``centre=True`` does. A frame op: the sizing op after it sees the crop."""

    boxes: str = "boxes"
    min_scale: float = 0.3
    max_scale: float = 1.0
    min_aspect_ratio: float = 0.5
    max_aspect_ratio: float = 2.0
    sampler_options: tuple[float, ...] = _OPTIONS
    trials: int = 40
    moves = "plan"
    draws = 0  # drawn a round at a time (frame)

    def __post_init__(self) -> None:
        if not isinstance(self.boxes, str) or not self.boxes:
            raise ArgumentError(f"RandomIoUCrop: boxes must be a field name, got {self.boxes!r}")
        pair("RandomIoUCrop", "(min_scale, max_scale)", (self.min_scale, self.max_scale), 0, 1)
        pair(
            "RandomIoUCrop",
            "(min_aspect_ratio, max_aspect_ratio)",
            (self.min_aspect_ratio, self.max_aspect_ratio),
        )
        opts = self.sampler_options
        if not isinstance(opts, (tuple, list)) or not opts:
            raise ArgumentError(f"RandomIoUCrop: sampler_options must be numbers, got {opts!r}")
        for v in opts:
            number("RandomIoUCrop", "sampler_options", v, 0.0)
        integer("RandomIoUCrop", "trials", self.trials, 1, 1000)

    def frame(
        self, heights: np.ndarray, widths: np.ndarray, draw: Draw, targets: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(heights)
        box = np.stack([np.zeros(n), np.zeros(n), widths, heights], axis=1).astype(np.float64)
        # Each sample's boxes, padded to the batch's most (``real`` marks the true ones).
        k = max((len(b) for b in targets), default=0)
        objs = np.zeros((n, max(k, 1), 4))
        real = np.zeros((n, max(k, 1)), bool)
        for j, b in enumerate(targets):
            objs[j, : len(b)], real[j, : len(b)] = b, True
        per = 1 + 4 * self.trials
        pending = np.arange(n)
        for r in range(ROUNDS):
            if not len(pending):
                break
            got, done = self._rounds(
                draw(r * per, per, pending),
                heights[pending].astype(np.float64),
                widths[pending].astype(np.float64),
                objs[pending],
                real[pending],
            )
            box[pending[done]] = got[done]
            pending = pending[~done]
        return (
            box,
            (box[:, 3] - box[:, 1]).astype(np.int64),
            (box[:, 2] - box[:, 0]).astype(np.int64),
        )

    def _rounds(
        self, u: np.ndarray, h: np.ndarray, w: np.ndarray, boxes: np.ndarray, real: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One round of v2's search for each of ``P`` samples on its draws ``u`` (P, 1 + 4 *
        trials), of sizes ``h``, ``w``, with boxes ``(P, K, 4)`` (``real``: (P, K), the
        sample's own, the rest padding): ``(P, 4)`` frame boxes (the whole frame: no crop,
        or the first crop that succeeded) and ``(P,)`` whether the round succeeded."""
        opts = np.asarray(self.sampler_options, np.float64)
        iou = opts[np.minimum((u[:, 0] * len(opts)).astype(np.int64), len(opts) - 1)]
        t = u[:, 1:].reshape(len(u), self.trials, 4)
        r0 = self.min_scale + (self.max_scale - self.min_scale) * t[..., 0]
        r1 = self.min_scale + (self.max_scale - self.min_scale) * t[..., 1]
        nw, nh = np.floor(w[:, None] * r0), np.floor(h[:, None] * r1)  # (P, T)
        with np.errstate(divide="ignore", invalid="ignore"):
            aspect = nw / nh
        left = np.floor((w[:, None] - nw) * t[..., 2])
        top = np.floor((h[:, None] - nh) * t[..., 3])
        ok = (aspect >= self.min_aspect_ratio) & (aspect <= self.max_aspect_ratio)
        ok &= (nw > 0) & (nh > 0)
        crops = np.stack([left, top, left + nw, top + nh], axis=2)  # (P, T, 4)
        c, b = crops[:, :, None], boxes[:, None]  # (P, T, 1, 4), (P, 1, K, 4)
        cx, cy = (b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2
        within = (c[..., 0] < cx) & (cx < c[..., 2]) & (c[..., 1] < cy) & (cy < c[..., 3])
        within &= real[:, None]
        iw = np.clip(np.minimum(b[..., 2], c[..., 2]) - np.maximum(b[..., 0], c[..., 0]), 0, None)
        ih = np.clip(np.minimum(b[..., 3], c[..., 3]) - np.maximum(b[..., 1], c[..., 1]), 0, None)
        inter = iw * ih
        area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
        union = area_b + (nw * nh)[..., None] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            ious = np.where(within, inter / union, -math.inf)
        ok &= within.any(axis=2) & (ious.max(axis=2) >= iou[:, None])
        first = np.argmax(ok, axis=1)
        got = crops[np.arange(len(u)), first]
        whole = iou >= 1.0  # no crop this round
        got[whole] = np.stack([np.zeros_like(w), np.zeros_like(h), w, h], axis=1)[whole]
        return got, whole | ok.any(axis=1)
