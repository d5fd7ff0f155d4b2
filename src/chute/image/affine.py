"""RandomAffine and RandomRotation: torchvision.transforms.v2's, per sample, on the decoded
uint8 batch, in a ``decode=`` list after the op that sizes it::

    decode={"image": [chute.Resize(224), chute.RandomAffine(15, translate=(0.1, 0.1))]}

Each sample draws its parameters from (seed, epoch, index) (:mod:`chute.image.draws`) as
v2's ``make_params`` does from torch's generator: the angle, scale and shears uniform in
their ranges, the translation ``round(uniform(-t * W, t * W))`` whole pixels. The map is v2's
``_get_inverse_affine_matrix``: about the image centre ``(W / 2, H / 2)`` (or ``center``) in
coordinates where pixel edges are whole numbers. Pixels move as v2's tensor path moves them
with ``interpolation=NEAREST``: output pixel ``p`` reads the input pixel nearest (half to
even, ``grid_sample``'s rounding) to the inverse map of its centre, ``fill`` where that lies
outside. What follows the image moves with it (:mod:`chute.image.follow`): a mask through the
same pixel map with its own fill, boxes and keypoints through the forward map a
:class:`chute.Geometry` field carries (:class:`Warp`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentValueError
from .checks import check_batch, check_draws, integer, number, pair
from .kernels import load

__all__ = [
    "RandomAffine",
    "RandomRotation",
    "Warp",
    "affine_maps",
    "check_fill",
    "move",
    "pixel_maps",
    "warp_batch",
]


class Warp(NamedTuple):
    """One warp round of a batch: ``forward`` (B, 3, 3), each sample's map of points (pixel
    edges at whole numbers: boxes, keypoints); ``inverse`` (B, 3, 3), each sample's map from
    an output to an input point, as the image is sampled; ``rows``, the samples it moves."""

    forward: np.ndarray
    inverse: np.ndarray
    rows: np.ndarray


def affine_maps(
    angle: Any, translate: Any, scale: Any, shear: Any, center: Any, inverted: bool
) -> np.ndarray:
    """(B, 3, 3): v2's ``_get_inverse_affine_matrix(center, angle, translate, scale, shear,
    inverted)`` per sample (angles in degrees; ``translate``, ``shear``, ``center``:
    (B, 2)), the last row ``0 0 1``."""
    rot = np.radians(np.asarray(angle, np.float64))
    sx, sy = np.radians(np.asarray(shear, np.float64)).T
    (cx, cy), (tx, ty) = np.asarray(center, np.float64).T, np.asarray(translate, np.float64).T
    s = np.asarray(scale, np.float64)
    a = np.cos(rot - sy) / np.cos(sy)
    b = -np.cos(rot - sy) * np.tan(sx) / np.cos(sy) - np.sin(rot)
    c = np.sin(rot - sy) / np.cos(sy)
    d = -np.sin(rot - sy) * np.tan(sx) / np.cos(sy) + np.cos(rot)
    m = np.zeros((len(rot), 3, 3))
    m[:, 2, 2] = 1.0
    if inverted:  # C RSS^-1 C^-1 T^-1
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = d / s, -b / s, -c / s, a / s
        m[:, 0, 2] = m[:, 0, 0] * (-cx - tx) + m[:, 0, 1] * (-cy - ty) + cx
        m[:, 1, 2] = m[:, 1, 0] * (-cx - tx) + m[:, 1, 1] * (-cy - ty) + cy
    else:  # T C RSS C^-1
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = a * s, b * s, c * s, d * s
        m[:, 0, 2] = m[:, 0, 0] * -cx + m[:, 0, 1] * -cy + cx + tx
        m[:, 1, 2] = m[:, 1, 0] * -cx + m[:, 1, 1] * -cy + cy + ty
    return m


def pixel_maps(inverse: np.ndarray) -> np.ndarray:
    """``inverse`` (B, 3, 3), maps between points with pixel edges at whole numbers, as maps
    between pixel indices (centres at whole numbers): ``T(-1/2) inverse T(1/2)``."""
    half = np.eye(3)
    half[:2, 2] = 0.5
    back = np.eye(3)
    back[:2, 2] = -0.5
    return back @ inverse @ half


def move(x: np.ndarray, warp: Warp, fill: int) -> None:
    """Move samples ``warp.rows`` of the C-contiguous integer batch ``x`` (B, C, H, W) or
    (B, H, W) in place by ``warp`` (a mask and its image through the same pixel map):
    nearest, ``fill`` where the map leaves the image."""
    if not len(warp.rows) or x.size == 0:
        return
    planes = x if x.ndim == 4 else x[:, None]
    m = np.ascontiguousarray(pixel_maps(warp.inverse[warp.rows]))
    load("warp").project(planes, warp.rows.astype(np.int64), m, fill)


def check_fill(op: str, fill: Any) -> int:
    """``fill``: the image's value (an int in [0, 255]) for the pixels a warp uncovers."""
    return integer(op, "fill", fill, 0, 255)


def check_center(op: str, center: Any) -> tuple[float, float] | None:
    """``center``: None (the image centre) or an ``(x, y)`` point in output pixels."""
    if center is None:
        return None
    if not (isinstance(center, (tuple, list)) and len(center) == 2):
        raise ArgumentError(f"{op}: center must be None or an (x, y) pair, got {center!r}")
    return number(op, "center[0]", center[0]), number(op, "center[1]", center[1])


def _span(op: str, name: str, value: Any, sizes: Sequence[int]) -> tuple[float, ...]:
    """v2's ``_setup_angle``: a number ``d`` >= 0 is ``(-d, d)``; else a sequence of one of
    ``sizes`` numbers, each (low, high) pair ordered."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        d = number(op, name, value, 0.0)
        return (-d, d)
    if not (isinstance(value, (tuple, list)) and len(value) in sizes):
        raise ArgumentError(
            f"{op}: {name} must be a number >= 0 or a sequence of {' or '.join(map(str, sizes))} "
            f"numbers, got {value!r}"
        )
    out = tuple(number(op, f"{name}[{k}]", v) for k, v in enumerate(value))
    for k in range(0, len(out), 2):
        if out[k] > out[k + 1]:
            raise ArgumentValueError(f"{op}: {name} must be (low, high) pairs, got {value!r}")
    return out


def _uniform(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return lo + u * (hi - lo)


def _centres(center: tuple[float, float] | None, n: int, h: int, w: int) -> np.ndarray:
    return np.tile(np.array((w * 0.5, h * 0.5) if center is None else center), (n, 1))


def warp_batch(op: Any, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
    """Warp the contiguous uint8 batch ``out`` (B, C, H, W) in place by the maps
    ``op.warp`` draws from ``u``, ``op.fill`` where the image is uncovered; returns it."""
    name = type(op).__name__
    check_batch(name, out, None)
    check_draws(name, out, u, op.draws)
    if out.numel():
        move(out.numpy(), op.warp(u, *out.shape[-2:]), op.fill)
    return out


def _affine_warp(args: tuple[Any, Any, Any, Any, Any]) -> Warp:
    """The forward and inverse maps of :func:`affine_maps` ``args``, for every sample."""
    return Warp(affine_maps(*args, False), affine_maps(*args, True), np.arange(len(args[0])))


@dataclass(frozen=True)
class RandomAffine:
    """torchvision.transforms.v2's ``RandomAffine`` with ``interpolation=NEAREST``, drawn per
    sample: rotation uniform in ``degrees`` (a number ``d``: ``(-d, d)``), translation up to
    ``translate = (a, b)`` of the width and height (whole pixels), scale uniform in ``scale =
    (low, high)``, shear uniform in ``shear`` (a number ``s`` or ``(low, high)``: along x;
    four numbers: x, then y), in degrees; ``fill`` (0 to 255) where the image is uncovered;
    ``center``: the ``(x, y)`` to turn about (default the image centre)."""

    degrees: Any
    translate: Any = None
    scale: Any = None
    shear: Any = None
    fill: int = 0
    center: Any = None

    moves = "warp"  # its map moves pixels after decoding (chute.image.follow)
    draws = 6  # angle, dx, dy, scale, shear x, shear y
    rounds_per_sample = 1

    def __post_init__(self) -> None:
        self._ranges()
        check_fill("RandomAffine", self.fill)
        check_center("RandomAffine", self.center)

    def _ranges(self) -> tuple[tuple[float, ...], tuple[float, float], tuple[float, float], Any]:
        op = "RandomAffine"
        degrees = _span(op, "degrees", self.degrees, (2,))
        translate = (0.0, 0.0)
        if self.translate is not None:
            if not (isinstance(self.translate, (tuple, list)) and len(self.translate) == 2):
                raise ArgumentError(
                    f"{op}: translate must be None or an (a, b) pair of fractions of the width "
                    f"and height, got {self.translate!r}"
                )
            a, b = self.translate
            translate = (
                number(op, "translate[0]", a, 0.0, 1.0),
                number(op, "translate[1]", b, 0.0, 1.0),
            )
        scale = (1.0, 1.0) if self.scale is None else pair(op, "scale", self.scale, 0.0)
        shear = (0.0, 0.0) if self.shear is None else _span(op, "shear", self.shear, (2, 4))
        return degrees, translate, scale, shear

    def warp(self, u: np.ndarray, height: int, width: int) -> Warp:
        """The samples' maps for draws ``u`` (B, 6) in an output frame of ``height`` x
        ``width`` (every sample moves)."""
        (lo, hi), (fx, fy), scale, shear = self._ranges()
        n = len(u)
        dx, dy = fx * width, fy * height
        translate = np.rint(
            np.stack([_uniform(u[:, 1], -dx, dx), _uniform(u[:, 2], -dy, dy)], -1)
        )  # v2: int(round(uniform(-max, max)))
        shears = np.zeros((n, 2))
        shears[:, 0] = _uniform(u[:, 4], shear[0], shear[1])
        if len(shear) == 4:
            shears[:, 1] = _uniform(u[:, 5], shear[2], shear[3])
        args = (
            _uniform(u[:, 0], lo, hi),
            translate,
            _uniform(u[:, 3], *scale),
            shears,
            _centres(check_center("RandomAffine", self.center), n, height, width),
        )
        return _affine_warp(args)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Warp the contiguous uint8 batch ``out`` (B, C, H, W) in place; returns it."""
        return warp_batch(self, out, u)


@dataclass(frozen=True)
class RandomRotation:
    """torchvision.transforms.v2's ``RandomRotation`` with ``interpolation=NEAREST``, drawn
    per sample: counter-clockwise by an angle uniform in ``degrees`` (a number ``d``:
    ``(-d, d)``) about ``center`` (default the image centre), ``fill`` (0 to 255) where the
    image is uncovered. ``expand=True`` (grow the canvas to hold the whole turned image) is
    refused: the batch's size is fixed by its sizing op."""

    degrees: Any
    expand: bool = False
    center: Any = None
    fill: int = 0

    moves = "warp"
    draws = 1
    rounds_per_sample = 1

    def __post_init__(self) -> None:
        _span("RandomRotation", "degrees", self.degrees, (2,))
        if not isinstance(self.expand, bool):
            raise ArgumentError(
                f"RandomRotation: expand must be True or False, got {self.expand!r}"
            )
        if self.expand:
            raise ArgumentValueError(
                "RandomRotation: expand=True would give each sample its own canvas size, but a "
                "batch has the one size its sizing op fixes; use expand=False (corners that turn "
                "out of the frame are cut) or follow with a sizing op of its own"
            )
        check_fill("RandomRotation", self.fill)
        check_center("RandomRotation", self.center)

    def warp(self, u: np.ndarray, height: int, width: int) -> Warp:
        """The samples' maps for draws ``u`` (B, 1): v2's ``F.rotate(angle)``, the affine map
        of ``-angle``."""
        lo, hi = _span("RandomRotation", "degrees", self.degrees, (2,))
        n = len(u)
        zeros = np.zeros((n, 2))
        args = (
            -_uniform(u[:, 0], lo, hi),
            zeros,
            np.ones(n),
            zeros,
            _centres(check_center("RandomRotation", self.center), n, height, width),
        )
        return _affine_warp(args)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Turn the contiguous uint8 batch ``out`` (B, C, H, W) in place; returns it."""
        return warp_batch(self, out, u)
