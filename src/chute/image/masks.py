"""Mask planes moved by a plan: the crop, resize, flip and padding of a leader image applied
to a :class:`chute.fields.Mask` that follows it (:class:`chute.image.follow.Follow`), by
nearest neighbour, pixel for pixel as PIL's ``NEAREST`` resize, class ids copied, never mixed.
A 2-D mask per sample becomes ``(B, H, W)``; instance masks ``(N, h, w)`` per sample, plane by
plane, a :class:`chute.RaggedBatch` of ``(N, H, W)``. The warps that follow the plan are
:func:`chute.image.follow.follow_warps`'."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..batch import RaggedBatch
from .ops import Plan, padded, placed

__all__ = ["follow_instances", "follow_masks", "resize_nearest"]


def planes(p: Plan, fill: int) -> list[tuple[Any, bool, dict[str, Any]]]:
    """Per sample of plan ``p``, how :func:`resize_nearest` moves a plane: its box, flip, and
    for a padded sample its ``inner``, ``dest`` and ``fill``."""
    boxes, flips = p.boxes.tolist(), p.flips.tolist()
    if p.inner is None:
        return [(boxes[i], flips[i], {}) for i in range(len(boxes))]
    pad, dest = padded(p), placed(p)
    return [
        (boxes[i], flips[i], {"inner": p.inner[i], "dest": dest[i], "fill": fill} if pad[i] else {})
        for i in range(len(boxes))
    ]


def follow_masks(
    values: np.ndarray, offsets: list[int], shapes: np.ndarray, p: Plan, fill: int, out: np.ndarray
) -> None:
    """Sample ``i``'s 2-D mask (``values[offsets[i]:offsets[i + 1]]``, of ``shapes[i]``)
    moved by plan ``p`` into ``out[i]``."""
    for i, (box, flip, padding) in enumerate(planes(p, fill)):
        src = values[offsets[i] : offsets[i + 1]].reshape(shapes[i])
        resize_nearest(src, box, flip, out[i], **padding)


def follow_instances(
    values: np.ndarray, offsets: list[int], shapes: np.ndarray, p: Plan, fill: int
) -> tuple[np.ndarray, RaggedBatch]:
    """Instance masks (sample ``i``: ``shapes[i]`` = (N, h, w)) moved plane by plane by plan
    ``p``: the planes ``(sum N, H, W)`` (for the warps to move next) and the batch they are,
    a RaggedBatch of (N, H, W) per sample."""
    oh, ow = p.size
    counts = shapes[:, 0]
    out = np.empty((int(counts.sum()), oh, ow), values.dtype)
    first = np.concatenate([[0], np.cumsum(counts)]).tolist()
    for i, (box, flip, padding) in enumerate(planes(p, fill)):
        src = values[offsets[i] : offsets[i + 1]].reshape(-1, *shapes[i, 1:].tolist())
        for k in range(len(src)):
            resize_nearest(src[k], box, flip, out[first[i] + k], **padding)
    sizes = np.stack([counts, np.full_like(counts, oh), np.full_like(counts, ow)], axis=1)
    batch = RaggedBatch(
        torch.from_numpy(out.reshape(-1)),
        torch.from_numpy(np.asarray(first, np.int64) * oh * ow),
        torch.from_numpy(sizes.astype(np.int64)),
    )
    return out, batch


def _nearest(lo: float, hi: float, n: int, size: int) -> np.ndarray:
    """The stored pixel each of ``n`` output pixels reads along one axis, exactly as PIL's
    nearest resize computes it: the box in float32, the step in float64, the centres summed
    one step at a time (``np.add.accumulate`` adds in order), truncated, clipped."""
    lo32, hi32 = np.float32(lo), np.float32(hi)
    step = float(hi32 - lo32) / n
    centres = np.add.accumulate(np.r_[float(lo32) + step * 0.5, np.full(n - 1, step)])
    return np.clip(centres, 0, size - 1).astype(np.intp)


def _placed_axis(lo: float, hi: float, inner: Any, a: int, b: int, n: int, size: int) -> Any:
    """The stored pixel each output pixel ``a..b-1`` of ``n`` reads along one axis of a box
    ``lo..hi`` that reaches past the image: ``floor(lo + (x + 0.5) * (hi - lo) / n)``, kept
    within ``inner`` (the part of the image shown)."""
    centres = lo + (np.arange(a, b) + 0.5) * ((hi - lo) / n)
    first = max(0, int(np.floor(inner[0])))
    last = min(size, int(np.ceil(inner[1]))) - 1
    return np.clip(np.floor(centres), first, max(first, last)).astype(np.intp)


def resize_nearest(
    src: np.ndarray,
    box: Any,
    flip: bool,
    out: np.ndarray,
    inner: Any = None,
    dest: Any = None,
    fill: int = 0,
) -> np.ndarray:
    """Nearest-neighbour crop + resize of 2-D ``src`` into ``out`` (H', W'), pixel for pixel
    PIL's ``resize(size, NEAREST, box=box)``: output pixel ``x`` reads stored column
    ``floor(left + (x + 0.5) * (right - left) / W')`` (pixel centres), rows alike; then
    mirrored when ``flip``. Values are copied, never mixed. A padded plan
    (:func:`chute.image.ops.padded`) gives ``inner`` (the part of ``src`` shown) and ``dest``
    (the output pixels showing it, :func:`chute.image.ops.placed`): the other pixels become
    ``fill``."""
    oh, ow = out.shape
    x0, y0, x1, y1 = (float(v) for v in box)
    if inner is None:
        cols = _nearest(x0, x1, ow, src.shape[1])
        rows = _nearest(y0, y1, oh, src.shape[0])
        if flip:
            cols = cols[::-1]
        np.take(np.take(src, rows, axis=0), cols, axis=1, out=out)
        return out
    a, b, c, d = (int(v) for v in dest)
    out[...] = fill
    if c > a and d > b:
        cols = _placed_axis(x0, x1, (inner[0], inner[2]), a, c, ow, src.shape[1])
        rows = _placed_axis(y0, y1, (inner[1], inner[3]), b, d, oh, src.shape[0])
        out[b:d, a:c] = np.take(np.take(src, rows, axis=0), cols, axis=1)
    if flip:
        out[...] = out[:, ::-1].copy()
    return out
