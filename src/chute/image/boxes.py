"""Boxes and keypoints mapped into a decoded image's frame, from what a
:class:`chute.Geometry` field carries per sample: the plan (crop box in stored pixels,
output size, flip), then the 3 x 3 map of each warp round (RandAugment's shears,
translations and rotations, :mod:`chute.image.warps`; RandomAffine's, RandomRotation's and
RandomPerspective's maps, :mod:`chute.image.affine`, :mod:`chute.image.perspective`).

The semantics are torchvision.transforms.v2's for ``tv_tensors.BoundingBoxes`` and
``tv_tensors.KeyPoints`` under crop -> resize -> horizontal flip -> ``F.affine`` /
``F.rotate`` / ``F.perspective`` per warp. Boxes (edges): shifted into the crop and clipped
to it, scaled to the output size, mirrored (``x -> W' - x``); then per warp, the four
corners mapped, the box enclosing them, clipped to the image. ``valid`` is what
``SanitizeBoundingBoxes(min_size)`` keeps (both sides at least ``min_size`` output
pixels). Keypoints (pixel centres): shifted, scaled, mirrored ``x -> W' - 1 - x``, mapped
by each warp, never clipped; ``inside`` is whether they lie within
``[0, W' - 1] x [0, H' - 1]`` (v2's ``clamp_keypoints`` range).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ArgumentError

__all__ = ["BOX_FORMATS", "transform_boxes", "transform_points"]

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")


_PLAN = 11  # the plan's columns (chute.image.follow.GEOMETRY_COLUMNS)


def _frame(params: Any, like: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The geometry columns, broadcast against ``like`` (..., k) along all but its last axis:
    the 11 of the plan, and the 9 of each warp round."""
    p = torch.as_tensor(params, dtype=torch.float64)
    if p.ndim == 0 or p.shape[-1] < _PLAN or (p.shape[-1] - _PLAN) % 9:
        raise ArgumentError(
            f"params must be a chute.Geometry field: the {_PLAN} geometry columns, then 9 per "
            f"warp round, got shape {tuple(p.shape)}"
        )
    while p.ndim < like.ndim:  # (B, C) against (B, K, 4): one params row per sample
        p = p.unsqueeze(-2)
    cols = [p[..., j : j + 1] for j in range(p.shape[-1])]
    return cols[:_PLAN], cols[_PLAN:]


def _map(x: torch.Tensor, y: torch.Tensor, m: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Points ``(x, y)`` through the forward map ``m`` (its 9 columns, a 3 x 3 matrix by
    rows; an affine map divides by 1)."""
    a, b, c, d, e, f, g, h, i = m
    w = g * x + h * y + i
    return (a * x + b * y + c) / w, (d * x + e * y + f) / w


def _to_xyxy(b: torch.Tensor, fmt: str) -> torch.Tensor:
    if fmt == "xyxy":
        return b.clone()
    if fmt == "xywh":
        return torch.cat([b[..., :2], b[..., :2] + b[..., 2:]], dim=-1)
    half = b[..., 2:] / 2
    return torch.cat([b[..., :2] - half, b[..., :2] + half], dim=-1)


def _from_xyxy(b: torch.Tensor, fmt: str) -> torch.Tensor:
    if fmt == "xyxy":
        return b
    wh = b[..., 2:] - b[..., :2]
    return torch.cat([b[..., :2] if fmt == "xywh" else b[..., :2] + wh / 2, wh], dim=-1)


def transform_boxes(
    boxes: Any, params: Any, format: str = "xyxy", min_size: float = 1.0, centre: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``boxes`` (..., 4) in stored pixels, mapped into the output frame of ``params`` (a
    :class:`chute.Geometry` field: (C,) for one sample, (B, C) for boxes (B, K, 4); for a
    ragged batch of boxes repeat each row, ``params.repeat_interleave(counts, 0)``).

    Returns ``(boxes, valid)``: float64 boxes in ``format`` (``xyxy``, ``xywh`` or
    ``cxcywh``, as given), clipped to the output image, and a bool (...) mask of those with
    both sides >= ``min_size`` (the others are degenerate: cut away by the crop); with
    ``centre=True``, also with their centre strictly inside the part of the image shown
    (v2's :class:`~chute.image.placing.RandomIoUCrop` drops the others).
    """
    if format not in BOX_FORMATS:
        raise ArgumentError(f"transform_boxes: format must be one of {BOX_FORMATS}, got {format!r}")
    b = torch.as_tensor(boxes, dtype=torch.float64)
    if b.ndim == 0 or b.shape[-1] != 4:
        raise ArgumentError(f"transform_boxes: boxes must be (..., 4), got {tuple(b.shape)}")
    (left, top, right, bottom, oh, ow, flip, il, it, ir, ib), warps = _frame(params, b)
    xy = _to_xyxy(b, format)
    sx, sy = ow / (right - left), oh / (bottom - top)
    x = (xy[..., 0::2].clamp(il, ir) - left) * sx  # clipped to the part of the image shown
    y = (xy[..., 1::2].clamp(it, ib) - top) * sy
    if centre:  # v2's RandomIoUCrop: a box whose centre is outside the crop is dropped
        cx = ((xy[..., 0] + xy[..., 2]) / 2)[..., None]
        cy = ((xy[..., 1] + xy[..., 3]) / 2)[..., None]
        kept = (il < cx) & (cx < ir) & (it < cy) & (cy < ib)
    x = torch.where(flip > 0, (ow - x).flip(-1), x)
    for r in range(0, len(warps), 9):  # each warp: the box enclosing its corners, clipped
        cx, cy = _map(x[..., [0, 1, 1, 0]], y[..., [0, 0, 1, 1]], warps[r : r + 9])
        x = torch.stack([cx.amin(-1), cx.amax(-1)], -1).clamp_min(0).minimum(ow)
        y = torch.stack([cy.amin(-1), cy.amax(-1)], -1).clamp_min(0).minimum(oh)
    out = torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)
    valid = ((out[..., 2] - out[..., 0]) >= min_size) & ((out[..., 3] - out[..., 1]) >= min_size)
    if centre:
        valid &= kept[..., 0]
    return _from_xyxy(out, format), valid


def transform_points(points: Any, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Keypoints ``(..., 2)`` ``(x, y)`` in stored pixels (pixel centres at whole numbers),
    mapped into the output frame of ``params`` (as for :func:`transform_boxes`); a flip maps
    ``x`` to ``W' - 1 - x``, as v2. Returns ``(points, inside)``: float64 points (not
    clipped) and a bool mask of those within ``[0, W' - 1] x [0, H' - 1]``."""
    pt = torch.as_tensor(points, dtype=torch.float64)
    if pt.ndim == 0 or pt.shape[-1] != 2:
        raise ArgumentError(f"transform_points: points must be (..., 2), got {tuple(pt.shape)}")
    (left, top, right, bottom, oh, ow, flip, *_), warps = _frame(params, pt)
    x = (pt[..., :1] - left) * (ow / (right - left))
    y = (pt[..., 1:] - top) * (oh / (bottom - top))
    x = torch.where(flip > 0, ow - 1 - x, x)
    for r in range(0, len(warps), 9):
        x, y = _map(x, y, warps[r : r + 9])
    inside = ((x >= 0) & (x <= ow - 1) & (y >= 0) & (y <= oh - 1))[..., 0]
    return torch.cat([x, y], dim=-1), inside
