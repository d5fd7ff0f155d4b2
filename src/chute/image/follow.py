"""Fields tied to an image field: ``decode={"image": ops, "mask": Follow("image"),
"geometry": Geometry("image"), "local": View("image", ops)}``.

The crop, output size and flip of each sample are planned once, for the field that has the
ops (:func:`chute.image.plan`), and applied to every field that follows it: a
:class:`chute.fields.Mask` is resized by nearest neighbour (class ids are copied, never
blended), another :class:`chute.fields.Image` bilinearly as the leader. The warps the
leader's RandAugment / TrivialAugmentWide draw (:mod:`chute.image.warps`) then move every
follower through the same pixel index as the image (:func:`follow_warps`), uncovered pixels
taking the follower's ``fill``; so do the per-sample maps of RandomAffine, RandomRotation and
RandomPerspective (:mod:`chute.image.affine`, :mod:`chute.image.perspective`).
:class:`Geometry` puts the plan and each warp's 3 x 3 matrix into the batch, for boxes and
keypoints (:func:`chute.transform_boxes`). Every op
says how its followers move (``moves``, see :data:`chute.image.ops.DECODE_OPS`); a tied
field whose leader has an op that does not say is refused when the loader is made
(:func:`check_followable`).
A :class:`View` is the other way round: the same stored image decoded again with ops of its
own (multi-crop training: two global views and several local ones of each image).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError
from .affine import Warp, move
from .draws import uniforms
from .ops import MOVES, Plan
from .randaugment import OPS, Round
from .warps import WARPS, forward, move_images, move_planes

__all__ = [
    "GEOMETRY_COLUMNS",
    "WARP_COLUMNS",
    "Follow",
    "Geometry",
    "View",
    "check_fill",
    "check_followable",
    "follow_warps",
    "geometry",
    "geometry_width",
    "view_seed",
    "warp_matrices",
]

GEOMETRY_COLUMNS = (
    "left",
    "top",
    "right",
    "bottom",
    "out_height",
    "out_width",
    "flip",
    "inner_left",
    "inner_top",
    "inner_right",
    "inner_bottom",
)
"""The first columns of a :class:`Geometry` field, per sample: the box in stored pixels that
the output frame shows (may be fractional, and reach past the image where it is padded), the
output size, 1.0 when mirrored left-right after the resize, and the part of the image the
output shows (the box clipped to the image and to every crop on the way; boxes are clipped
to it). Then 9 per warp round of the leader's ops (:data:`WARP_COLUMNS`)."""

WARP_COLUMNS = ("a", "b", "c", "d", "e", "f", "g", "h", "i")
"""The columns of one warp round in a :class:`Geometry` row: the forward map, a 3 x 3
matrix by rows, ``x' = (a x + b y + c) / (g x + h y + i)``, ``y' = (d x + e y + f) / (g x +
h y + i)`` in output pixels with pixel edges at whole numbers (``g = h = 0``, ``i = 1`` for
an affine map; the identity when the sample's round drew no warp), in the order the rounds
ran."""


def _leader(field: Any, what: str) -> str:
    if not isinstance(field, str) or not field:
        raise ArgumentError(f"{what}: the field to follow must be a field name, got {field!r}")
    return field


@dataclass(frozen=True)
class Follow:
    """Decode this field with the crop, resize and flip planned for image field ``field``
    (whose ``decode=`` entry has the ops), then move it by the leader's warps
    (RandAugment's shears, translations, rotations). ``fill``: what a mask's pixels that a
    warp uncovers become (torchvision's default, 0; an ignore index such as 255 keeps them
    out of the loss); an image follower is filled with 0, as its leader. Every sample's
    stored size must equal the leader's: a :class:`~chute.FormatError` names the sample
    otherwise."""

    field: str
    fill: int = 0

    def __post_init__(self) -> None:
        _leader(self.field, "Follow")
        if not isinstance(self.fill, (int, np.integer)) or isinstance(self.fill, bool):
            raise ArgumentError(
                f"Follow({self.field!r}): fill must be an integer (a mask's class id for the "
                f"pixels a warp uncovers, e.g. 255 as an ignore index), got {self.fill!r}"
            )


@dataclass(frozen=True)
class Geometry:
    """A float64 ``(B, 11 + 9 * rounds)`` batch field holding how image field ``field`` was
    made: per sample, the plan (:data:`GEOMETRY_COLUMNS`), then the map of each warp round
    of its ops (:data:`WARP_COLUMNS`; ``(B, 11)`` without RandAugment, TrivialAugmentWide,
    RandomAffine, RandomRotation or RandomPerspective). Give it to :func:`chute.transform_boxes` or
    :func:`chute.transform_points`."""

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


def check_followable(ops: Sequence[Any], what: str) -> None:
    """Refuse (:class:`~chute.ArgumentError`) leader ``ops`` with an op that does not say how
    its followers move (``moves``): a follower would be left behind."""
    for op in ops:
        if getattr(op, "moves", None) not in MOVES:
            raise ArgumentError(
                f"{what}: {type(op).__name__} does not say how the fields that follow the "
                f"image move with it (its 'moves' is not one of {MOVES}); a mask, box or "
                "keypoint would be left behind. Drop the tied field or the op"
            )


def check_fill(fill: int, kind: str, dtype: str, what: str) -> None:
    """Refuse (:class:`~chute.ArgumentError`) a :class:`Follow` ``fill`` that a follower of
    ``kind`` ("mask" or "image") and ``dtype`` cannot take."""
    if kind == "image" and fill != 0:
        raise ArgumentError(
            f"{what}: fill={fill} is for a mask; an image follower is filled with 0, as its leader"
        )
    if kind == "mask" and not np.iinfo(dtype).min <= fill <= np.iinfo(dtype).max:
        raise ArgumentError(
            f"{what}: fill={fill} does not fit the mask's {dtype} class ids; give a fill in "
            f"[{np.iinfo(dtype).min}, {np.iinfo(dtype).max}]"
        )


def _warping(ops: Sequence[Any]) -> list[tuple[int, Any]]:
    """The ops that warp after decoding, with their positions (their draws' streams)."""
    return [(k, op) for k, op in enumerate(ops) if getattr(op, "moves", None) == "warp"]


def geometry_width(ops: Sequence[Any]) -> int:
    """The columns of a :class:`Geometry` row for leader ``ops``: 11, and 9 per warp round."""
    return len(GEOMETRY_COLUMNS) + len(WARP_COLUMNS) * sum(
        op.rounds_per_sample for _, op in _warping(ops)
    )


def _rounds(
    ops: Sequence[Any], idx: np.ndarray, seed: int, epoch: int, size: tuple[int, ...]
) -> Iterator[tuple[Any, Round | Warp]]:
    """Each warp round of ``ops`` for samples ``idx`` with the op that drew it (same
    streams, same output size as the leader): RandAugment's (op numbers, magnitudes), or
    the :class:`~chute.image.affine.Warp` of an op that maps each sample by its own matrix."""
    for k, op in _warping(ops):
        u = uniforms(seed, epoch, idx, k, op.draws)
        if hasattr(op, "warp"):
            yield op, op.warp(u, *size)
        else:
            for r in op.rounds(u, *size):
                yield op, r


def follow_warps(
    ops: Sequence[Any], out: np.ndarray, indices: Any, seed: int, epoch: int, fill: int = 0
) -> None:
    """Move follower batch ``out`` in place by the warps leader ``ops`` drew for samples
    ``indices`` (with the leader's ``seed``, at ``epoch``): a mask ``(B, H, W)`` with
    ``fill`` where uncovered, an image ``(B, 3, H, W)`` uint8 with the leader's fill (0
    for RandAugment's). The same pixel index as the leader's image, so the two stay aligned
    pixel for pixel."""
    if not _warping(ops) or out.size == 0:
        return
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    for leader, r in _rounds(ops, idx, seed, epoch, out.shape[-2:]):
        if isinstance(r, Warp):
            move(out, r, leader.fill if out.ndim == 4 else fill)
            continue
        op, mag = r
        for name in WARPS:
            rows = np.flatnonzero(op == OPS.index(name))
            if not len(rows):
                continue
            if out.ndim == 4:
                move_images(out, rows, name, mag[rows])
            else:
                move_planes(out, rows, name, mag[rows], fill)


def warp_matrices(
    ops: Sequence[Any], indices: Any, seed: int, epoch: int, size: tuple[int, int]
) -> np.ndarray:
    """``(B, rounds, 3, 3)`` float64: the forward map of each warp round of leader ``ops``
    per sample (:func:`chute.image.warps.forward` for RandAugment's, the op's
    :class:`~chute.image.affine.Warp` otherwise; the identity where a round drew no warp),
    in an output frame of ``size`` (height, width)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    rounds = list(_rounds(ops, idx, seed, epoch, size))
    m = np.zeros((len(idx), len(rounds), 3, 3))
    m[..., 0, 0] = m[..., 1, 1] = m[..., 2, 2] = 1.0
    for r, (_, got) in enumerate(rounds):
        if isinstance(got, Warp):
            m[:, r] = got.forward
            continue
        op, mag = got
        for name in WARPS:
            rows = np.flatnonzero(op == OPS.index(name))
            if len(rows):
                m[rows, r, :2] = forward(name, mag[rows], *size)
    return m


def geometry(
    p: Plan,
    out: np.ndarray,
    ops: Sequence[Any] = (),
    indices: Any = (),
    seed: int = 0,
    epoch: int = 0,
) -> np.ndarray:
    """Write plan ``p`` into ``out`` (B, :func:`geometry_width`) float64 as
    :data:`GEOMETRY_COLUMNS`, then the :func:`warp_matrices` of leader ``ops`` (drawn for
    samples ``indices`` with the leader's ``seed`` at ``epoch``)."""
    out[:, :4] = p.boxes
    out[:, 4], out[:, 5] = p.size
    out[:, 6] = p.flips
    out[:, 7:11] = p.boxes if p.inner is None else p.inner
    if _warping(ops):
        out[:, len(GEOMETRY_COLUMNS) :] = warp_matrices(ops, indices, seed, epoch, p.size).reshape(
            len(out), -1
        )
    return out
