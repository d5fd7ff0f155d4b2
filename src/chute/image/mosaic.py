"""Mosaic (YOLOv4 / ultralytics): four decoded images of a batch tiled into one, with their
boxes, masks and instance masks placed alike. ``Loader(..., transform=chute.Mosaic(...))``.

Output sample ``j`` is sample ``j`` of the batch (top left) and three partners drawn from
the batch (top right, bottom left, bottom right) around a centre ``(cx, cy)`` drawn in the
output frame: each image is translated by whole pixels so that its corner meets the centre
(the top-left image's bottom-right corner, and so on) and cut to the output. With the output
the images' size (the default) the four pieces tile it exactly; a larger ``size`` leaves the
rest in the fill colour (ultralytics' canvas of twice the size). Every pixel is a copy of
one source pixel or the fill: no resampling, so masks keep their ids and boxes move by whole
pixels. Boxes are translated, clipped to their piece, and dropped with the rows of their
``per_box`` fields (labels, instance masks) and of the ``keypoints`` fields when a side is
under ``min_size`` (v2's ``SanitizeBoundingBoxes``). Keypoints (pixel centres, with a
visibility column) move with their box's image; one that leaves its piece keeps its
coordinates (never clipped, as :func:`chute.transform_points`) and gets visibility 0. The
draws are a pure function of (seed, epoch, sample index) (:func:`chute.image.uniforms`); the
partners are positions in the batch, which the loader's order fixes, so a resumed run tiles
the same mosaics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from ..batch import RaggedBatch
from ..errors import ArgumentError, ArgumentValueError, SchemaError
from .boxes import transform_boxes
from .checks import integer, number, pair, probability, size2
from .draws import uniforms
from .mixing import BatchTransform
from .mosaic_rows import Kept, Piece, place_instances, points, rows_of
from .placing import fill_colour

__all__ = ["Layout", "Mosaic"]

STREAM = 0x4D4F53414943  # "MOSAIC": the draws' stream, apart from the decode ops' (0, 1, ...)


class Layout(NamedTuple):
    """Where each output sample's pieces come from: ``sources`` (B, 4) batch positions (top
    left, top right, bottom left, bottom right; -1: no piece, the sample was not tiled) and
    ``origins`` (B, 4, 2) the ``(x, y)`` in output pixels of each source image's top-left
    corner (its pixel ``(x, y)`` lands on output pixel ``(x + ox, y + oy)``)."""

    sources: np.ndarray
    origins: np.ndarray


def _names(op: str, what: str, value: Any) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(n, str) and n for n in names):
        raise ArgumentError(f"{op}: {what} must be field names, got {value!r}")
    return names


@dataclass(frozen=True)
class Mosaic(BatchTransform):
    """Four images -> one, with probability ``p`` per sample (see the module's docstring).
    ``center``: the centre's range, as fractions of the output width and height;
    ``size``: the output ``(height, width)`` (None: the images'); ``fill``: the colour of
    output pixels no image covers. ``boxes``: a ragged ``(K, 4)`` xyxy field, in the decoded
    images' pixels, or in stored pixels with ``geometry`` naming the batch's
    :class:`chute.Geometry` field (mapped by :func:`chute.transform_boxes` first; the
    geometry field is then dropped from the batch, as it no longer describes the images).
    ``per_box``: ragged fields with one row per box (class labels, an instance-mask field
    with a plane per box), kept or dropped with their box and carried unmoved (a float field
    of points, last dimension 2 or 3, is refused there). ``keypoints``: ragged fields of
    ``(K, 3)`` keypoints ``(x, y, visibility)`` per box (pixel centres, in the same frame as
    the boxes: mapped by :func:`chute.transform_points` with ``geometry``), shifted with
    their box's image and kept or dropped with it; visibility is set to 0 where a point lies
    outside its piece ``[x0, x1 - 1] x [y0, y1 - 1]`` (which lies within its image), the
    coordinates are not clipped (float64, as the boxes). ``masks``: fields placed as the
    image: a ``(B, ..., H, W)`` tensor (a semantic mask, another image) with ``mask_fill``
    where no image is, or a :class:`chute.RaggedBatch` of ``(N, H, W)`` instance masks
    (0 outside their piece). A tensor field of the images' size that is not listed is
    refused: it would be left behind."""

    p: float = 1.0
    center: tuple[float, float] = (0.25, 0.75)
    size: int | tuple[int, int] | None = None
    fill: int | tuple[int, int, int] = 114
    image: str = "image"
    boxes: str | None = None
    geometry: str | None = None
    per_box: Sequence[str] = ()
    keypoints: Sequence[str] = ()
    masks: Sequence[str] = ()
    mask_fill: int = 0
    min_size: float = 1.0

    def __post_init__(self) -> None:
        probability("Mosaic", "p", self.p)
        lo, _ = pair("Mosaic", "center", self.center, -math.inf, 1.0)
        if lo < 0:
            raise ArgumentValueError(f"Mosaic: center must lie in [0, 1], got {self.center!r}")
        if self.size is not None:
            size2(self.size, "Mosaic")
        fill_colour("Mosaic", self.fill)
        integer("Mosaic", "mask_fill", self.mask_fill, -(2**31), 2**31 - 1)
        number("Mosaic", "min_size", self.min_size, 0.0)
        _names("Mosaic", "image", self.image)
        for what in ("boxes", "geometry"):
            if getattr(self, what) is not None:
                _names("Mosaic", what, getattr(self, what))
        object.__setattr__(self, "per_box", _names("Mosaic", "per_box", self.per_box))
        object.__setattr__(self, "masks", _names("Mosaic", "masks", self.masks))
        object.__setattr__(self, "keypoints", _names("Mosaic", "keypoints", self.keypoints))
        if self.boxes is None and (self.per_box or self.keypoints or self.geometry is not None):
            raise ArgumentError(
                "Mosaic: per_box, keypoints and geometry go with boxes=: name the batch's "
                "boxes field"
            )
        both = sorted(set(self.keypoints) & {*self.per_box, *self.masks})
        if both:
            raise ArgumentError(
                f"Mosaic: field {both[0]!r} is in keypoints and per_box or masks: keypoints= "
                "moves a field's points with their boxes, list it there only"
            )

    def layout(
        self, indices: Any, seed: int, epoch: int, image: tuple[int, int], out: tuple[int, int]
    ) -> Layout:
        """The pieces of a batch of samples ``indices`` (images of ``image`` (h, w), output
        ``out`` (H, W)): each sample draws, from (seed, epoch, its index), whether it is
        tiled (``u0 < p``), the centre ``cx = floor(W * (c0 + (c1 - c0) * u1))`` (``cy``
        alike from ``u2``) and its partners, the positions ``(j + 1 + floor(u * (B - 1))) %
        B`` for ``u3..u5`` (itself only in a batch of one)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        b = len(idx)
        (h, w), (oh, ow) = image, out
        u = uniforms(seed, epoch, idx, STREAM, 6)
        lo, hi = self.center
        cx = np.floor(ow * (lo + (hi - lo) * u[:, 1])).astype(np.int64)
        cy = np.floor(oh * (lo + (hi - lo) * u[:, 2])).astype(np.int64)
        me = np.arange(b)
        partners = (me[:, None] + 1 + np.floor(u[:, 3:] * max(b - 1, 0)).astype(np.int64)) % b
        tiled = u[:, 0] < self.p
        sources = np.full((b, 4), -1, np.int64)
        sources[:, 0] = me
        sources[tiled, 1:] = partners[tiled]
        origins = np.zeros((b, 4, 2), np.int64)
        left, top = cx - w, cy - h
        origins[:, :, 0] = np.stack([left, cx, left, cx], axis=1)
        origins[:, :, 1] = np.stack([top, top, cy, cy], axis=1)
        origins[~tiled] = 0  # an untiled sample stays where it is
        return Layout(sources, origins)

    def apply(self, batch: dict[str, Any], indices: np.ndarray, seed: int, epoch: int) -> Any:
        img = batch.get(self.image)
        if not isinstance(img, torch.Tensor) or img.dim() != 4:
            got = tuple(img.shape) if isinstance(img, torch.Tensor) else type(img).__name__
            raise SchemaError(
                f"Mosaic: field {self.image!r} must be a (B, C, H, W) tensor of decoded "
                f"images, got {got}"
            )
        b, (h, w) = len(img), tuple(img.shape[-2:])
        idx = np.asarray(indices).reshape(-1)
        if len(idx) != b:
            raise SchemaError(f"Mosaic: {len(idx)} indices for {b} images (field {self.image!r})")
        self._check_fields(batch, b, (h, w))
        out_hw = (h, w) if self.size is None else size2(self.size, "Mosaic")
        lay = self.layout(idx, seed, epoch, (h, w), out_hw)
        pieces = _pieces(lay, (h, w), out_hw)
        rgb = torch.tensor(fill_colour("Mosaic", self.fill), dtype=img.dtype)
        fill = rgb.reshape(3, 1, 1) if img.shape[1] == 3 else rgb[0]
        out = dict(batch)
        out[self.image] = _place(img, pieces, out_hw, fill)
        keep = None
        if self.boxes is not None:
            out[self.boxes], keep = self._boxes(batch, pieces, idx)
            if self.geometry is not None:
                out.pop(self.geometry, None)
        for name in self.masks:
            field = batch[name]
            if isinstance(field, RaggedBatch):
                rows = keep if name in self.per_box else None
                out[name] = place_instances(name, field, pieces, out_hw, rows)
            else:
                out[name] = _place(field, pieces, out_hw, self.mask_fill)
        for name in self.per_box:
            if name not in self.masks:
                assert keep is not None
                out[name] = rows_of(name, batch[name], keep)
        geo = batch[self.geometry] if self.geometry is not None else None
        for name in self.keypoints:
            assert keep is not None
            out[name] = points(name, batch[name], keep, geo)
        return out

    def _check_fields(self, batch: dict[str, Any], b: int, hw: tuple[int, int]) -> None:
        """Every named field is in the batch; no unnamed tensor of the images' size."""
        named = [*self.masks, *self.per_box, *self.keypoints]
        named += [n for n in (self.boxes, self.geometry) if n is not None]
        for name in named:
            if name not in batch:
                raise SchemaError(f"Mosaic: the batch has no field {name!r} ({sorted(batch)})")
        for name in self.masks:
            v = batch[name]
            ok = isinstance(v, RaggedBatch) and v.shapes is not None and len(v) == b
            ok = ok or (isinstance(v, torch.Tensor) and v.dim() >= 3 and len(v) == b)
            if ok and isinstance(v, RaggedBatch):
                ok = v.shapes is not None and bool((v.shapes[:, -2:] == torch.tensor(hw)).all())
            elif ok:
                ok = tuple(v.shape[-2:]) == hw
            if not ok:
                raise SchemaError(
                    f"Mosaic: mask field {name!r} must be a (B, ..., H, W) tensor or a "
                    f"RaggedBatch of (N, H, W) planes of the images' size {hw} for {b} images"
                )
            if name in self.per_box and not isinstance(v, RaggedBatch):
                raise SchemaError(
                    f"Mosaic: field {name!r} is in per_box and masks, which takes instance "
                    "masks (a RaggedBatch of one (H, W) plane per box), got a tensor"
                )
        hw_t = torch.tensor(hw)
        for name, v in batch.items():
            if name == self.image or name in self.masks:
                continue
            planes = isinstance(v, RaggedBatch) and v.shapes is not None and len(v) > 0
            if planes and v.shapes.shape[1] >= 2 and bool((v.shapes[:, -2:] == hw_t).all()):
                shape = f"(RaggedBatch of (N, {hw[0]}, {hw[1]}) planes)"
            elif isinstance(v, torch.Tensor) and v.dim() >= 3 and tuple(v.shape[-2:]) == hw:
                shape = str(tuple(v.shape))
            else:
                continue
            raise ArgumentError(
                f"Mosaic: field {name!r} {shape} is of the images' size and would be left "
                "behind by the tiling: list it in masks= (or drop it)"
            )

    def _boxes(
        self, batch: dict[str, Any], pieces: list[list[Piece]], idx: np.ndarray
    ) -> tuple[RaggedBatch, Kept]:
        """The boxes of each output sample (its pieces' boxes, placed and clipped, the
        degenerate ones dropped) and which source rows were kept (:class:`Kept`)."""
        assert self.boxes is not None
        field = batch[self.boxes]
        src = [np.asarray(v, dtype=np.float64) for v in field]
        if len(src) != len(idx) or any(v.size % 4 for v in src):
            raise SchemaError(
                f"Mosaic: field {self.boxes!r} must hold (K, 4) xyxy boxes for each of the "
                f"{len(idx)} samples"
            )
        counts = np.array([v.size // 4 for v in src], np.int64)
        boxes = np.concatenate([v.reshape(-1, 4) for v in src]) if src else np.zeros((0, 4))
        valid = np.ones(len(boxes), bool)
        if self.geometry is not None:
            geo = torch.as_tensor(batch[self.geometry], dtype=torch.float64)
            rows_geo = geo.repeat_interleave(torch.from_numpy(counts), 0)
            mapped, shown = transform_boxes(boxes, rows_geo)
            boxes, valid = mapped.numpy(), shown.numpy()
        flat = [p for sample in pieces for p in sample]
        per = np.array([len(sample) for sample in pieces], np.int64)
        srcs = np.array([p[0] for p in flat], np.int64)
        shift = np.array([[p[1], p[2], p[1], p[2]] for p in flat], np.float64).reshape(-1, 4)
        rect = np.array([[*p[3]] for p in flat], np.float64).reshape(-1, 4)
        n = counts[srcs]  # boxes per piece
        first = np.concatenate([[0], np.cumsum(counts)])[srcs]
        piece = np.repeat(np.arange(len(flat)), n)
        rows = first[piece] + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        lo, hi = rect[piece][:, [0, 1, 0, 1]], rect[piece][:, [2, 3, 2, 3]]
        moved = np.minimum(np.maximum(boxes[rows] + shift[piece], lo), hi)
        ok = valid[rows] & (moved[:, 2] - moved[:, 0] >= self.min_size)
        ok &= moved[:, 3] - moved[:, 1] >= self.min_size
        owner = np.repeat(np.repeat(np.arange(len(pieces)), per), n)  # output sample per row
        out_counts = np.bincount(owner[ok], minlength=len(pieces))
        offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(out_counts)]).astype(np.int64))
        kept = Kept(
            counts,
            rows[ok],
            offsets,
            np.split(ok, np.cumsum(n)[:-1]),
            shift[piece][ok][:, :2],
            rect[piece][ok],
        )
        return RaggedBatch(torch.from_numpy(moved[ok]), offsets), kept


def _pieces(lay: Layout, hw: tuple[int, int], out: tuple[int, int]) -> list[list[Piece]]:
    """Per output sample, its pieces: (source position, ox, oy, (x0, y0, x1, y1)), the
    output rectangle its image covers (pieces cut to nothing are left out)."""
    (h, w), (oh, ow) = hw, out
    got = []
    for srcs, origins in zip(lay.sources.tolist(), lay.origins.tolist(), strict=True):
        sample = []
        for s, (ox, oy) in zip(srcs, origins, strict=True):
            if s < 0:
                continue
            x0, y0 = max(ox, 0), max(oy, 0)
            x1, y1 = min(ox + w, ow), min(oy + h, oh)
            sample.append((s, ox, oy, (x0, y0, max(x0, x1), max(y0, y1))))
        got.append(sample)
    return got


def _place(
    src: torch.Tensor, pieces: list[list[Piece]], out: tuple[int, int], fill: Any
) -> torch.Tensor:
    """``src`` (B, ..., h, w) tiled by ``pieces`` into a new (B, ..., H, W) tensor; the
    pixels no piece covers are ``fill``."""
    dst = torch.empty((len(pieces), *src.shape[1:-2], *out), dtype=src.dtype)
    a, d = src.contiguous().numpy(), dst.numpy()  # numpy's slicing: a fraction of torch's cost
    for j, sample in enumerate(pieces):
        if sum((x1 - x0) * (y1 - y0) for *_, (x0, y0, x1, y1) in sample) < out[0] * out[1]:
            dst[j] = torch.as_tensor(fill, dtype=src.dtype)
        for s, ox, oy, (x0, y0, x1, y1) in sample:
            d[j, ..., y0:y1, x0:x1] = a[s, ..., y0 - oy : y1 - oy, x0 - ox : x1 - ox]
    return dst
