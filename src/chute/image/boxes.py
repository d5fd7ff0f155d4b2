"""Boxes and keypoints mapped into a decoded image's frame, from the per-sample plan a
:class:`chute.Geometry` field carries (crop box in stored pixels, output size, flip).

The semantics are torchvision.transforms.v2's for ``tv_tensors.BoundingBoxes`` under
crop -> resize -> horizontal flip: boxes are shifted into the crop and clipped to it, scaled
to the output size, mirrored (``x -> W' - x``); ``valid`` is what
``SanitizeBoundingBoxes(min_size)`` keeps (both sides at least ``min_size`` output pixels).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ArgumentError

__all__ = ["BOX_FORMATS", "transform_boxes", "transform_points"]

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")


def _frame(params: Any, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The geometry columns, broadcast against ``like`` (..., k) along all but its last axis."""
    p = torch.as_tensor(params, dtype=torch.float64)
    if p.shape[-1] != 7:
        raise ArgumentError(
            f"params must end in the 7 geometry columns, got shape {tuple(p.shape)}"
        )
    while p.ndim < like.ndim:  # (B, 7) against (B, K, 4): one params row per sample
        p = p.unsqueeze(-2)
    return tuple(p[..., j : j + 1] for j in range(7))


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
    boxes: Any, params: Any, format: str = "xyxy", min_size: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``boxes`` (..., 4) in stored pixels, mapped into the output frame of ``params`` (a
    :class:`chute.Geometry` field: (7,) for one sample, (B, 7) for boxes (B, K, 4); for a
    ragged batch of boxes repeat each row, ``params.repeat_interleave(counts, 0)``).

    Returns ``(boxes, valid)``: float64 boxes in ``format`` (``xyxy``, ``xywh`` or
    ``cxcywh``, as given), clipped to the output image, and a bool (...) mask of those with
    both sides >= ``min_size`` (the others are degenerate: cut away by the crop).
    """
    if format not in BOX_FORMATS:
        raise ArgumentError(f"transform_boxes: format must be one of {BOX_FORMATS}, got {format!r}")
    b = torch.as_tensor(boxes, dtype=torch.float64)
    if b.ndim == 0 or b.shape[-1] != 4:
        raise ArgumentError(f"transform_boxes: boxes must be (..., 4), got {tuple(b.shape)}")
    left, top, right, bottom, oh, ow, flip = _frame(params, b)
    xy = _to_xyxy(b, format)
    sx, sy = ow / (right - left), oh / (bottom - top)
    x = ((xy[..., 0::2] - left).clamp_min(0).minimum(right - left)) * sx
    y = ((xy[..., 1::2] - top).clamp_min(0).minimum(bottom - top)) * sy
    x = torch.where(flip > 0, (ow - x).flip(-1), x)
    out = torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=-1)
    valid = ((out[..., 2] - out[..., 0]) >= min_size) & ((out[..., 3] - out[..., 1]) >= min_size)
    return _from_xyxy(out, format), valid


def transform_points(points: Any, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Keypoints ``(..., 2)`` ``(x, y)`` in stored pixels, mapped into the output frame of
    ``params`` (as for :func:`transform_boxes`). Returns ``(points, inside)``: float64
    points (not clipped) and a bool mask of those inside the output image."""
    pt = torch.as_tensor(points, dtype=torch.float64)
    if pt.ndim == 0 or pt.shape[-1] != 2:
        raise ArgumentError(f"transform_points: points must be (..., 2), got {tuple(pt.shape)}")
    left, top, right, bottom, oh, ow, flip = _frame(params, pt)
    x = (pt[..., :1] - left) * (ow / (right - left))
    y = (pt[..., 1:] - top) * (oh / (bottom - top))
    x = torch.where(flip > 0, ow - x, x)
    inside = ((x >= 0) & (x <= ow) & (y >= 0) & (y <= oh))[..., 0]
    return torch.cat([x, y], dim=-1), inside
