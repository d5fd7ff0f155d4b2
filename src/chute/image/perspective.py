"""RandomPerspective: torchvision.transforms.v2's, per sample, on the decoded uint8 batch, in
a ``decode=`` list after the op that sizes it::

    decode={"image": [chute.Resize(224), chute.RandomPerspective(0.5, p=0.5)]}

Each sample draws from (seed, epoch, index) (:mod:`chute.image.draws`) whether it is
distorted (probability ``p``) and, as v2's ``make_params``, where each corner goes: a whole
pixel up to ``int(distortion_scale * (W // 2))`` in from the left or right edge and
``int(distortion_scale * (H // 2))`` from the top or bottom. The map is v2's
``_get_perspective_coeffs`` (the least-squares fit of the eight coefficients, rounded to
float32): output to input points with pixel edges at whole numbers; the image is sampled as
v2's tensor path samples it with ``interpolation=NEAREST`` (its default is bilinear),
``fill`` outside. Boxes and keypoints move by v2's inverse of those coefficients
(``perspective_bounding_boxes``): the forward map a :class:`chute.Geometry` field carries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ArgumentValueError
from .affine import Warp, check_fill, warp_batch
from .checks import number

__all__ = ["RandomPerspective", "perspective_coefficients"]


def _randint(u: np.ndarray, lo: int | np.ndarray, hi: int | np.ndarray) -> np.ndarray:
    """torch.randint(lo, hi)'s outcome for uniform ``u``: ``lo + floor(u * (hi - lo))``."""
    return lo + np.floor(u * (np.asarray(hi) - lo))


def perspective_coefficients(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(B, 8) float64 (float32 values): v2's ``_get_perspective_coeffs(startpoints,
    endpoints)`` per sample (``start``, ``end``: (B, 4, 2)), the map from ``end`` to
    ``start``: ``x = (c0 x' + c1 y' + c2) / (c6 x' + c7 y' + 1)``, likewise ``y`` with c3 to
    c5; solved as v2 does (float64 least squares, gels), then rounded to float32."""
    e = torch.tensor(np.asarray(end, np.float64))
    s = torch.tensor(np.asarray(start, np.float64))
    ex, ey, sx, sy = e[..., 0], e[..., 1], s[..., 0], s[..., 1]
    one, zero = torch.ones_like(ex), torch.zeros_like(ex)
    across = torch.stack([ex, ey, one, zero, zero, zero, -sx * ex, -sx * ey], -1)
    down = torch.stack([zero, zero, zero, ex, ey, one, -sy * ex, -sy * ey], -1)
    a = torch.stack([across, down], -2).reshape(len(e), 8, 8)
    b = s.reshape(len(s), 8, 1)
    res = torch.linalg.lstsq(a, b, driver="gels").solution[..., 0].to(torch.float32)
    return res.numpy().astype(np.float64)


def _matrices(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inverse, forward) (B, 3, 3) of coefficients ``c`` (B, 8): the image's map, and v2's
    closed-form inverse (``_compute_perspective_thetas``) that moves boxes and points."""
    inverse = np.concatenate([c, np.ones((len(c), 1))], 1).reshape(-1, 3, 3)
    c0, c1, c2, c3, c4, c5, c6, c7 = c.T
    denom = c0 * c4 - c1 * c3
    forward = (
        np.stack(
            [
                c4 - c5 * c7,
                -c1 + c2 * c7,
                c1 * c5 - c2 * c4,
                -c3 + c5 * c6,
                c0 - c2 * c6,
                -c0 * c5 + c2 * c3,
                -c4 * c6 + c3 * c7,
                -c0 * c7 + c1 * c6,
            ],
            1,
        )
        / denom[:, None]
    )
    return inverse, np.concatenate([forward, np.ones((len(c), 1))], 1).reshape(-1, 3, 3)


@dataclass(frozen=True)
class RandomPerspective:
    """torchvision.transforms.v2's ``RandomPerspective`` with ``interpolation=NEAREST``,
    drawn per sample: with probability ``p``, each corner moved in by up to
    ``distortion_scale`` (0 to 1) of half the width and height, the image mapped to the new
    corners, ``fill`` (0 to 255) where it is uncovered. A frame narrower or shorter than 2
    pixels is left as it is (its corners cannot be fitted)."""

    distortion_scale: float = 0.5
    p: float = 0.5
    fill: int = 0

    moves = "warp"  # its map moves pixels after decoding (chute.image.follow)
    draws = 9  # whether, then each corner's x and y
    rounds_per_sample = 1

    def __post_init__(self) -> None:
        number("RandomPerspective", "distortion_scale", self.distortion_scale, 0.0, 1.0)
        number("RandomPerspective", "p", self.p, 0.0, 1.0)
        check_fill("RandomPerspective", self.fill)

    def warp(self, u: np.ndarray, height: int, width: int) -> Warp:
        """The samples' maps for draws ``u`` (B, 9) in an output frame of ``height`` x
        ``width``; the samples not distorted keep the identity."""
        n = len(u)
        identity = np.broadcast_to(np.eye(3), (n, 3, 3)).copy()
        rows = np.flatnonzero(u[:, 0] < self.p) if height > 1 and width > 1 else np.zeros(0, int)
        if not len(rows):
            return Warp(identity, identity.copy(), rows)
        bw = int(self.distortion_scale * (width // 2)) + 1
        bh = int(self.distortion_scale * (height // 2)) + 1
        v = u[rows, 1:]
        end = np.stack(
            [
                np.stack([_randint(v[:, 0], 0, bw), _randint(v[:, 1], 0, bh)], -1),
                np.stack([_randint(v[:, 2], width - bw, width), _randint(v[:, 3], 0, bh)], -1),
                np.stack(
                    [_randint(v[:, 4], width - bw, width), _randint(v[:, 5], height - bh, height)],
                    -1,
                ),
                np.stack([_randint(v[:, 6], 0, bw), _randint(v[:, 7], height - bh, height)], -1),
            ],
            1,
        )
        start = np.array([[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]], float)
        inverse, forward = _matrices(
            perspective_coefficients(np.broadcast_to(start, end.shape), end)
        )
        if not (np.isfinite(inverse).all() and np.isfinite(forward).all()):
            raise ArgumentValueError(
                f"RandomPerspective: no map fits the corners drawn for a {height} x {width} frame"
            )
        full_inverse, full_forward = identity.copy(), identity
        full_inverse[rows], full_forward[rows] = inverse, forward
        return Warp(full_forward, full_inverse, rows)

    def apply(self, out: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """Distort the contiguous uint8 batch ``out`` (B, C, H, W) in place; returns it."""
        return warp_batch(self, out, u)
