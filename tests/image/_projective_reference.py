"""Independent references for RandomAffine / RandomRotation / RandomPerspective, written from
torchvision.transforms.v2's definitions (torchvision cannot be installed beside the pinned
torch): ``make_params`` of each transform for one sample's uniforms (torch's ``uniform_`` is
``lo + u * (hi - lo)``, ``randint(lo, hi)`` is ``lo + floor(u * (hi - lo))``),
``_get_inverse_affine_matrix``, ``_get_perspective_coeffs`` and the inverse coefficients of
``perspective_bounding_boxes``, one sample at a time in plain Python; and a nearest sampler
(output pixel centre through the inverse map, rounded half to even, ``fill`` outside)."""

from __future__ import annotations

import math

import numpy as np
import torch


def inverse_affine(center, angle, translate, scale, shear, inverted=True) -> list[float]:
    rot = math.radians(angle)
    sx, sy = (math.radians(s) for s in shear)
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    if inverted:
        m = [x / scale for x in [d, -b, 0.0, -c, a, 0.0]]
        m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
        m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
        m[2] += cx
        m[5] += cy
    else:
        m = [x * scale for x in [a, b, 0.0, c, d, 0.0]]
        m[2] += m[0] * (-cx) + m[1] * (-cy)
        m[5] += m[3] * (-cx) + m[4] * (-cy)
        m[2] += cx + tx
        m[5] += cy + ty
    return m


def _pair(v):
    return (-v, v) if isinstance(v, (int, float)) else tuple(v)


def affine_params(op, u, h: int, w: int):
    """v2's RandomAffine.make_params for one sample: (angle, translate, scale, shear)."""
    lo, hi = _pair(op.degrees)
    angle = lo + u[0] * (hi - lo)
    tx = ty = 0
    if op.translate is not None:
        dx, dy = op.translate[0] * w, op.translate[1] * h
        tx = round(-dx + u[1] * 2 * dx)  # v2: int(round(...))
        ty = round(-dy + u[2] * 2 * dy)
    scale = 1.0 if op.scale is None else op.scale[0] + u[3] * (op.scale[1] - op.scale[0])
    shx = shy = 0.0
    if op.shear is not None:
        s = _pair(op.shear)
        shx = s[0] + u[4] * (s[1] - s[0])
        if len(s) == 4:
            shy = s[2] + u[5] * (s[3] - s[2])
    return angle, [tx, ty], scale, [shx, shy]


def affine_maps(op, u, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, inverse) 3x3 of one sample of RandomAffine or RandomRotation (F.rotate(a) is
    F.affine(-a) about the centre)."""
    centre = [w * 0.5, h * 0.5] if op.center is None else list(op.center)
    if hasattr(op, "expand"):
        lo, hi = _pair(op.degrees)
        args = (-(lo + u[0] * (hi - lo)), [0.0, 0.0], 1.0, [0.0, 0.0])
    else:
        args = affine_params(op, u, h, w)
    fwd = inverse_affine(centre, *args, inverted=False)
    inv = inverse_affine(centre, *args, inverted=True)
    return np.array([*fwd, 0, 0, 1.0]).reshape(3, 3), np.array([*inv, 0, 0, 1.0]).reshape(3, 3)


def perspective_maps(op, u, h: int, w: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(forward, inverse) 3x3 of one sample of RandomPerspective, None when not applied."""
    if not u[0] < op.p:
        return None
    hh, hw = h // 2, w // 2
    bh, bw = int(op.distortion_scale * hh) + 1, int(op.distortion_scale * hw) + 1

    def randint(v, lo, hi):
        return lo + math.floor(v * (hi - lo))

    v = u[1:]
    tl = [randint(v[0], 0, bw), randint(v[1], 0, bh)]
    tr = [randint(v[2], w - bw, w), randint(v[3], 0, bh)]
    br = [randint(v[4], w - bw, w), randint(v[5], h - bh, h)]
    bl = [randint(v[6], 0, bw), randint(v[7], h - bh, h)]
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    a = torch.zeros(8, 8, dtype=torch.float64)
    for i, (p1, p2) in enumerate(zip([tl, tr, br, bl], start, strict=True)):
        a[2 * i] = torch.tensor([p1[0], p1[1], 1, 0, 0, 0, -p2[0] * p1[0], -p2[0] * p1[1]])
        a[2 * i + 1] = torch.tensor([0, 0, 0, p1[0], p1[1], 1, -p2[1] * p1[0], -p2[1] * p1[1]])
    b = torch.tensor(start, dtype=torch.float64).view(8)
    c = torch.linalg.lstsq(a, b, driver="gels").solution.to(torch.float32).tolist()
    den = c[0] * c[4] - c[1] * c[3]
    ic = [
        (c[4] - c[5] * c[7]) / den,
        (-c[1] + c[2] * c[7]) / den,
        (c[1] * c[5] - c[2] * c[4]) / den,
        (-c[3] + c[5] * c[6]) / den,
        (c[0] - c[2] * c[6]) / den,
        (-c[0] * c[5] + c[2] * c[3]) / den,
        (-c[4] * c[6] + c[3] * c[7]) / den,
        (-c[0] * c[7] + c[1] * c[6]) / den,
    ]
    return np.array([*ic, 1.0]).reshape(3, 3), np.array([*c, 1.0]).reshape(3, 3)


def sample_nearest(src: np.ndarray, inverse: np.ndarray, fill) -> np.ndarray:
    """``src`` (..., H, W) through ``inverse`` (output to input point, pixel edges at whole
    numbers): each output pixel centre mapped, the input pixel at ``rint(x - 1/2)``,
    ``rint(y - 1/2)`` (half to even), ``fill`` outside."""
    h, w = src.shape[-2:]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    q = np.einsum("ij,jhw->ihw", inverse, np.stack([xs, ys, np.ones_like(xs)]))
    ix = np.rint(q[0] / q[2] - 0.5)
    iy = np.rint(q[1] / q[2] - 0.5)
    ok = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
    out = np.full(src.shape, fill, src.dtype)
    out[..., ok] = src[..., iy[ok].astype(int), ix[ok].astype(int)]
    return out


def maps(op, u, h: int, w: int) -> tuple[np.ndarray, np.ndarray] | None:
    """One sample's (forward, inverse), None when the op leaves it as it is."""
    if hasattr(op, "distortion_scale"):
        return perspective_maps(op, u, h, w)
    return affine_maps(op, u, h, w)
