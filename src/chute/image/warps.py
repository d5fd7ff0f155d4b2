"""The warps of RandAugment and TrivialAugmentWide (:data:`WARPS`: ShearX / ShearY,
TranslateX / TranslateY, Rotate) as the image sees them and as everything that follows it does.

A warp of sample ``i`` at magnitude ``mag[i]`` is an affine map of the output frame. Pixels
move by a nearest-neighbour gather (:func:`warp_index`): each output pixel reads the input
pixel that the inverse map sends its centre to, as PIL's ``Image.transform(AFFINE,
NEAREST)`` (what torchvision calls for PIL images), the fill where that lies outside. The
image (:func:`move_images`, fill 0) and every field that follows it (:func:`move_planes`: a
mask, with its own fill) read through the same index, so they move together pixel for pixel.
Boxes and keypoints move by the forward map (:func:`forward`): torchvision.transforms.v2's
``F.affine`` / ``F.rotate`` matrix for the parameters its RandAugment passes (shears about
the top-left corner, translations by whole pixels, rotations about the image centre).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from .kernels import load

__all__ = ["WARPS", "forward", "move_images", "move_planes", "warp_index"]

WARPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
"""The geometric ops of :data:`chute.image.randaugment.OPS`: each moves pixels."""


def _inverse(name: str, mag: np.ndarray, h: int, w: int) -> np.ndarray:
    """(n, 2, 3): the inverse affine maps (output to input pixel coordinates) of the warps
    ``name`` at ``mag``, as PIL samples them."""
    m = np.zeros((len(mag), 2, 3))
    m[:, 0, 0] = m[:, 1, 1] = 1.0
    if name in ("TranslateX", "TranslateY"):  # by whole pixels (torchvision: int(magnitude))
        m[:, WARPS.index(name) - 2, 2] = -np.trunc(mag)
    elif name == "Rotate":  # counter-clockwise about the centre, as PIL's ``rotate``
        cx, cy = w / 2.0, h / 2.0
        a = -np.radians(mag)
        cos, sin = np.round(np.cos(a), 15), np.round(np.sin(a), 15)
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, sin, -sin, cos
        m[:, 0, 2] = cos * -cx + sin * -cy + cx
        m[:, 1, 2] = -sin * -cx + cos * -cy + cy
    else:
        raise ArgumentError(f"not a warp: {name!r}; the warps are {WARPS}")
    return m


def warp_index(name: str, mag: np.ndarray, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """``(which, index)`` of the warps ``name`` at magnitudes ``mag`` (one per sample) in an
    ``h`` x ``w`` frame: sample ``j``'s output pixel ``p`` reads input pixel
    ``index[which[j], p]`` of its plane (uint32; ``h * w``: the fill). One index per distinct
    magnitude (the ops draw few: RandAugment two, +-m), shared by its samples.

    Shears take a whole-pixel shift per line: ShearX's output pixel ``x`` of row ``y`` reads
    input ``x + floor(0.5 + mag * (y + 0.5))`` (PIL's pixel-centre nearest sample of the
    shear about the top-left corner), ShearY's alike down each column. Translations and
    rotations go through :func:`_inverse`."""
    mag = np.asarray(mag, dtype=np.float64).reshape(-1)
    warps, which = np.unique(mag, return_inverse=True)
    kernels = load("warp")
    if name in ("ShearX", "ShearY"):
        across = name == "ShearX"
        lines = np.arange(h if across else w) + 0.5
        shifts = np.floor(0.5 + warps[:, None] * lines).astype(np.int64)
        return which.reshape(-1), kernels.shear_index(shifts, h, w, across)
    return which.reshape(-1), kernels.affine_index(_inverse(name, warps, h, w), h, w)


def move_images(x: np.ndarray, rows: np.ndarray, name: str, mag: np.ndarray) -> None:
    """Warp samples ``rows`` of the contiguous uint8 batch ``x`` (B, 3, H, W) in place by
    ``name`` at ``mag`` (one per row); uncovered pixels become 0."""
    which, index = warp_index(name, mag, *x.shape[-2:])
    load("warp").gather(x, rows, which, index)


def move_planes(x: np.ndarray, rows: np.ndarray, name: str, mag: np.ndarray, fill: int) -> None:
    """Warp samples ``rows`` of the C-contiguous ``x`` (B, H, W), any integer dtype that
    holds ``fill``, in place by ``name`` at ``mag`` (one per row), through the index the
    image uses; uncovered pixels become ``fill``. Values are copied, never mixed."""
    if x.ndim != 3 or not x.flags.c_contiguous or x.dtype.kind not in "iu":
        raise ArgumentError(
            f"move_planes: x must be a C-contiguous integer (B, H, W) batch, got {x.dtype} "
            f"{x.shape}"
        )
    which, index = warp_index(name, mag, *x.shape[-2:])
    load("warp").gather_planes(x, np.asarray(rows, np.int64), which, index, fill)


def forward(name: str, mag: np.ndarray, h: int, w: int) -> np.ndarray:
    """(n, 2, 3): the forward maps ``x' = a x + b y + c``, ``y' = d x + e y + f`` of the warps
    ``name`` at ``mag`` in an ``h`` x ``w`` frame (pixel edges at whole numbers, as boxes),
    torchvision.transforms.v2's for the same parameters: ShearX ``x' = x - mag * y``, ShearY
    ``y' = y - mag * x`` (the shear about the top-left corner), TranslateX/Y by
    ``trunc(mag)``, Rotate ``mag`` degrees counter-clockwise about ``(w / 2, h / 2)``."""
    mag = np.asarray(mag, dtype=np.float64).reshape(-1)
    m = np.zeros((len(mag), 2, 3))
    m[:, 0, 0] = m[:, 1, 1] = 1.0
    if name == "ShearX":
        m[:, 0, 1] = -mag
    elif name == "ShearY":
        m[:, 1, 0] = -mag
    elif name in ("TranslateX", "TranslateY"):
        m[:, WARPS.index(name) - 2, 2] = np.trunc(mag)
    elif name == "Rotate":  # v2: the affine of angle -mag about the centre
        rot = np.radians(-mag)
        cos, sin = np.cos(rot), np.sin(rot)
        cx, cy = w * 0.5, h * 0.5
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, -sin, sin, cos
        m[:, 0, 2] = cx - cos * cx + sin * cy
        m[:, 1, 2] = cy - sin * cx - cos * cy
    else:
        raise ArgumentError(f"not a warp: {name!r}; the warps are {WARPS}")
    return m
