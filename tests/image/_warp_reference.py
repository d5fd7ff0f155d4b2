"""Independent references for what follows a warped image, written from torchvision's
definitions (torchvision cannot be installed beside the pinned torch):

- the parameters torchvision's RandAugment passes to ``F.affine`` / ``F.rotate`` per op
  (shears as ``degrees(atan(mag))`` about the top-left corner, translations by
  ``int(mag)``, rotations about the image centre);
- the 2x3 matrix ``F.affine`` builds from them (``M = T C RSS C^-1``: rotation, shears
  ``SHx(s) = [[1, -tan s], [0, 1]]``, ``SHy(s) = [[1, 0], [-tan s, 1]]``) and its inverse;
- a mask warped with the inverse by nearest neighbour at pixel centres, as PIL's
  ``Image.transform(AFFINE, NEAREST)`` (torchvision's PIL path), ``fill`` outside;
- v2's boxes (crop, clip, scale, mirror ``W - x``; per warp the box enclosing the four mapped
  corners, clipped) and keypoints (shift, scale, mirror ``W - 1 - x``, mapped, unclipped).
"""

from __future__ import annotations

import math

import numpy as np

WARP_NAMES = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


def affine_params(name: str, mag: float, h: int, w: int) -> tuple[float, list, list, list]:
    """(angle, translate, shear, center) of v2's ``F.affine`` for RandAugment op ``name`` at
    ``mag`` (``F.rotate(angle)`` is ``F.affine`` at ``-angle`` about the centre)."""
    centre = [w * 0.5, h * 0.5]
    if name == "ShearX":
        return 0.0, [0.0, 0.0], [math.degrees(math.atan(mag)), 0.0], [0.0, 0.0]
    if name == "ShearY":
        return 0.0, [0.0, 0.0], [0.0, math.degrees(math.atan(mag))], [0.0, 0.0]
    if name == "TranslateX":
        return 0.0, [float(int(mag)), 0.0], [0.0, 0.0], centre
    if name == "TranslateY":
        return 0.0, [0.0, float(int(mag))], [0.0, 0.0], centre
    assert name == "Rotate", name
    return -mag, [0.0, 0.0], [0.0, 0.0], centre


def affine_matrix(angle: float, translate: list, shear: list, center: list) -> np.ndarray:
    """(2, 3) forward map of ``F.affine`` (scale 1): ``T C RSS C^-1``, ``RSS`` the rotation
    and shears in torchvision's closed form (``R(a) SHy(sy) SHx(sx)`` up to its
    normalisation by ``cos(sy)``)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    a = math.cos(rot - sy) / math.cos(sy)
    c = math.sin(rot - sy) / math.cos(sy)
    rss = np.array(
        [[a, -(a * math.tan(sx) + math.sin(rot))], [c, math.cos(rot) - c * math.tan(sx)]]
    )
    centre = np.asarray(center, np.float64)
    t = np.asarray(translate, np.float64)
    return np.concatenate([rss, (centre + t - rss @ centre)[:, None]], axis=1)


def forward_matrix(name: str, mag: float, h: int, w: int) -> np.ndarray:
    return affine_matrix(*affine_params(name, mag, h, w))


def inverse_matrix(name: str, mag: float, h: int, w: int) -> np.ndarray:
    full = np.vstack([forward_matrix(name, mag, h, w), [0.0, 0.0, 1.0]])
    return np.linalg.inv(full)[:2]


def warp_nearest(plane: np.ndarray, inv: np.ndarray, fill: int) -> np.ndarray:
    """``plane`` warped by the inverse map ``inv``: output pixel (x, y) reads input pixel
    ``floor(inv @ (x + .5, y + .5, 1))``, ``fill`` outside."""
    h, w = plane.shape
    y, x = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    ix = np.floor(inv[0, 0] * x + inv[0, 1] * y + inv[0, 2]).astype(np.int64)
    iy = np.floor(inv[1, 0] * x + inv[1, 1] * y + inv[1, 2]).astype(np.int64)
    inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
    out = np.full_like(plane, fill)
    out[inside] = plane[iy[inside], ix[inside]]
    return out


def boxes_through(boxes: np.ndarray, geo: np.ndarray) -> np.ndarray:
    """v2's xyxy boxes of one sample through its Geometry row ``geo``, one box at a time:
    clipped to the part of the image shown (``inner``: the crop, less any padding)."""
    left, top, right, bottom, oh, ow, flip, il, it, ir, ib = geo[:11].tolist()
    out = []
    for x1, y1, x2, y2 in boxes.tolist():
        cw, ch = right - left, bottom - top
        x1, x2 = ((min(max(x, il), ir) - left) * ow / cw for x in (x1, x2))
        y1, y2 = ((min(max(y, it), ib) - top) * oh / ch for y in (y1, y2))
        if flip:
            x1, x2 = ow - x2, ow - x1
        for m in geo[11:].reshape(-1, 3, 3):
            corners = np.array([[x1, y1, 1], [x2, y1, 1], [x2, y2, 1], [x1, y2, 1]]) @ m.T
            corners = corners[:, :2] / corners[:, 2:]
            x1, y1 = np.clip(corners.min(0), 0, [ow, oh])
            x2, y2 = np.clip(corners.max(0), 0, [ow, oh])
        out.append([x1, y1, x2, y2])
    return np.array(out, np.float64)


def points_through(points: np.ndarray, geo: np.ndarray) -> np.ndarray:
    """v2's keypoints of one sample through its Geometry row ``geo``."""
    left, top, right, bottom, oh, ow, flip = geo[:7].tolist()
    out = []
    for x, y in points.tolist():
        x, y = (x - left) * ow / (right - left), (y - top) * oh / (bottom - top)
        if flip:
            x = ow - 1 - x
        for m in geo[11:].reshape(-1, 3, 3):
            x, y, w = m @ [x, y, 1.0]
            x, y = x / w, y / w
        out.append([x, y])
    return np.array(out, np.float64)
