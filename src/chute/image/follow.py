"""Fields tied to an image field: ``decode={"image": ops, "mask": Follow("image"),
"geometry": Geometry("image"), "local": View("image", ops)}``.

The crop, output size and flip of each sample are planned once, for the field that has the
ops (:func:`chute.image.plan`), and applied to every field that follows it: a
:class:`chute.fields.Mask` is resized by nearest neighbour (class ids are copied, never
blended), another :class:`chute.fields.Image` bilinearly as the leader. :class:`Geometry` puts
the plan itself into the batch, for boxes and keypoints (:func:`chute.transform_boxes`).
A :class:`View` is the other way round: the same stored image decoded again with ops of its
own (multi-crop training: two global views and several local ones of each image).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError
from .ops import Plan

__all__ = [
    "GEOMETRY_COLUMNS",
    "Follow",
    "Geometry",
    "View",
    "geometry",
    "resize_nearest",
    "view_seed",
]

GEOMETRY_COLUMNS = ("left", "top", "right", "bottom", "out_height", "out_width", "flip")
"""The columns of a :class:`Geometry` field, per sample: the crop box in stored pixels
(may be fractional), the output size, and 1.0 when mirrored left-right after the resize."""


def _leader(field: Any, what: str) -> str:
    if not isinstance(field, str) or not field:
        raise ArgumentError(f"{what}: the field to follow must be a field name, got {field!r}")
    return field


@dataclass(frozen=True)
class Follow:
    """Decode this field with the crop, resize and flip planned for image field ``field``
    (whose ``decode=`` entry has the ops). Every sample's stored size must equal the
    leader's: a :class:`~chute.FormatError` names the sample otherwise."""

    field: str

    def __post_init__(self) -> None:
        _leader(self.field, "Follow")


@dataclass(frozen=True)
class Geometry:
    """A float64 ``(B, 7)`` batch field holding the plan of image field ``field``: per
    sample, :data:`GEOMETRY_COLUMNS`. Give it to :func:`chute.transform_boxes`."""

    field: str

    def __post_init__(self) -> None:
        _leader(self.field, "Geometry")


@dataclass(frozen=True)
class View:
    """A batch field decoded from image field ``field``'s stored image with ops of its own
    (crop, flip, augmentations): ``decode={"image": global_ops, "local_1": View("image",
    local_ops), "local_2": View("image", local_ops)}``. Each view draws its own random
    numbers (its name salts the seed), so two views with the same ops differ; the view's
    name must not be a field of the dataset."""

    field: str
    ops: Sequence[Any]

    def __post_init__(self) -> None:
        _leader(self.field, "View")


def view_seed(seed: int, name: str) -> int:
    """The seed of view ``name``'s draws: the loader's, salted by the name (stable across
    runs and processes, unlike ``hash``)."""
    return (seed ^ (zlib.crc32(name.encode()) << 32)) & 0xFFFFFFFFFFFFFFFF


def geometry(p: Plan, out: np.ndarray) -> np.ndarray:
    """Write plan ``p`` into ``out`` (B, 7) float64 as :data:`GEOMETRY_COLUMNS`."""
    out[:, :4] = p.boxes
    out[:, 4], out[:, 5] = p.size
    out[:, 6] = p.flips
    return out


def _nearest(lo: float, hi: float, n: int, size: int) -> np.ndarray:
    """The stored pixel each of ``n`` output pixels reads along one axis, exactly as PIL's
    nearest resize computes it: the box in float32, the step in float64, the centres summed
    one step at a time (``np.add.accumulate`` adds in order), truncated, clipped."""
    lo32, hi32 = np.float32(lo), np.float32(hi)
    step = float(hi32 - lo32) / n
    centres = np.add.accumulate(np.r_[float(lo32) + step * 0.5, np.full(n - 1, step)])
    return np.clip(centres, 0, size - 1).astype(np.intp)


def resize_nearest(src: np.ndarray, box: Any, flip: bool, out: np.ndarray) -> np.ndarray:
    """Nearest-neighbour crop + resize of 2-D ``src`` into ``out`` (H', W'), pixel for pixel
    PIL's ``resize(size, NEAREST, box=box)``: output pixel ``x`` reads stored column
    ``floor(left + (x + 0.5) * (right - left) / W')`` (pixel centres), rows alike; then
    mirrored when ``flip``. Values are copied, never mixed."""
    oh, ow = out.shape
    x0, y0, x1, y1 = (float(v) for v in box)
    cols = _nearest(x0, x1, ow, src.shape[1])
    rows = _nearest(y0, y1, oh, src.shape[0])
    if flip:
        cols = cols[::-1]
    np.take(np.take(src, rows, axis=0), cols, axis=1, out=out)
    return out
