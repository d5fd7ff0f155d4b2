"""The rows that :class:`chute.Mosaic` keeps with their boxes: per-box fields carried
unmoved, keypoints shifted with their box's image (visibility 0 outside its piece), instance
masks placed like the image."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from ..batch import RaggedBatch
from ..errors import ArgumentError, SchemaError
from .boxes import transform_points

__all__ = ["Kept", "Piece", "place_instances", "points", "rows_of"]

Piece = tuple[int, int, int, tuple[int, int, int, int]]  # source, ox, oy, output rect


class Kept(NamedTuple):
    """Which boxes Mosaic kept: ``counts`` (B,) boxes per source sample, ``rows`` the kept
    source rows (into the batch's boxes, concatenated) in output order, ``offsets`` each
    output sample's first, ``pieces`` a bool row mask per piece (in the pieces' order),
    ``shift`` (n, 2) the ``(ox, oy)`` and ``rect`` (n, 4) the output rectangle of each kept
    row's piece."""

    counts: np.ndarray
    rows: np.ndarray
    offsets: torch.Tensor
    pieces: list[np.ndarray]
    shift: np.ndarray
    rect: np.ndarray


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def _flat(rows: list[torch.Tensor], like: torch.Tensor) -> RaggedBatch:
    """A RaggedBatch of the samples ``rows``, flattened, with each sample's shape."""
    if not rows:
        return RaggedBatch(like.reshape(-1)[:0], torch.zeros(1, dtype=torch.int64))
    sizes = [r.numel() for r in rows]
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    shapes = torch.tensor([list(r.shape) for r in rows], dtype=torch.int64)
    return RaggedBatch(torch.cat([r.reshape(-1) for r in rows]), offsets, shapes)


def _check_rows(name: str, got: int, boxes: int, s: int) -> None:
    if got != boxes:
        raise SchemaError(
            f"Mosaic: field {name!r} has {got} rows for sample at batch position {s}, which "
            f"has {boxes} boxes; a per_box field needs one row per box"
        )


def _gather(name: str, field: Any, kept: Kept) -> torch.Tensor:
    """Per-box field ``name``'s rows, every sample's concatenated, one per source box."""
    src = [torch.as_tensor(np.asarray(v)) for v in field]
    have = np.array([len(v) for v in src], np.int64)
    if len(have) != len(kept.counts) or (have != kept.counts).any():
        s = int(np.flatnonzero(have != kept.counts)[0]) if len(have) == len(kept.counts) else 0
        _check_rows(name, int(have[s]) if len(have) else 0, int(kept.counts[s]), s)
    return torch.cat(src) if src else torch.zeros(0)


def rows_of(name: str, field: Any, kept: Kept) -> RaggedBatch:
    """Per-box field ``name``: each output sample's rows, the rows of the boxes kept,
    unmoved; a float field whose rows end in 2 or 3 numbers (points) is refused."""
    values = _gather(name, field, kept)
    if values.is_floating_point() and values.dim() >= 2 and values.shape[-1] in (2, 3):
        raise ArgumentError(
            f"Mosaic: per_box field {name!r} has float rows of shape {tuple(values.shape[1:])}, "
            "which look like points: per_box carries rows unmoved, list it in keypoints= "
            "(K, 3) to move it with its boxes (or store it as another dtype or shape)"
        )
    return RaggedBatch(values[_t(kept.rows)], kept.offsets)


def points(name: str, field: Any, kept: Kept, geometry: Any) -> RaggedBatch:
    """Keypoint field ``name`` (K, 3) per box: the points of the boxes kept, mapped by
    the geometry (if any) and shifted with their piece; visibility 0 outside it."""
    src = _gather(name, field, kept).to(torch.float64)
    if src.dim() != 3 or src.shape[-1] != 3:
        raise SchemaError(
            f"Mosaic: keypoint field {name!r} must hold (K, 3) points (x, y, visibility) "
            f"per box, got rows of shape {tuple(src.shape[1:])}; a (K, 2) field has no "
            "column to mark the points that leave their piece: add a visibility column"
        )
    xy, vis = src[..., :2], src[..., 2]
    if geometry is not None:
        geo = torch.as_tensor(geometry, dtype=torch.float64)
        xy, _ = transform_points(xy, geo.repeat_interleave(_t(kept.counts), 0))
    rows = _t(kept.rows)
    xy = xy[rows] + _t(kept.shift)[:, None, :]
    rect = _t(kept.rect)[:, None, :]
    x, y = xy[..., 0], xy[..., 1]
    # the piece lies within the shifted image: outside it covers outside the decoded image
    inside = (x >= rect[..., 0]) & (x <= rect[..., 2] - 1)
    inside &= (y >= rect[..., 1]) & (y <= rect[..., 3] - 1)
    vis = torch.where(inside, vis[rows], 0.0)
    return RaggedBatch(torch.cat([xy, vis[..., None]], dim=-1), kept.offsets)


def place_instances(
    name: str,
    field: RaggedBatch,
    pieces: list[list[Piece]],
    out: tuple[int, int],
    keep: Kept | None,
) -> RaggedBatch:
    """Instance masks (N, h, w) per sample placed by ``pieces`` into (N', H, W) planes, 0
    outside their piece; with ``keep``, only the planes of the boxes kept."""
    src = list(field)
    if keep is not None:
        for s, planes in enumerate(src):
            _check_rows(name, len(planes), int(keep.counts[s]), s)
    rows = []
    k = 0  # the piece's number, in the order of keep.pieces
    for sample in pieces:
        got = []
        for s, ox, oy, (x0, y0, x1, y1) in sample:
            planes = src[s]
            if keep is not None:
                planes = planes[torch.from_numpy(keep.pieces[k])]
                k += 1
            dst = torch.zeros((len(planes), *out), dtype=planes.dtype)
            dst[:, y0:y1, x0:x1] = planes[:, y0 - oy : y1 - oy, x0 - ox : x1 - ox]
            got.append(dst)
        rows.append(torch.cat(got) if got else torch.zeros((0, *out), dtype=field.values.dtype))
    return _flat(rows, like=field.values)
