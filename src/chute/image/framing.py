"""Where a decoded image lands in its output ``(3, H, W)``: the part of the image a plan
shows, resized into its place (:func:`place`, PIL's resize of a box, which may be
fractional), or the whole image resized once at the plan's scale with the output a window
on it (:func:`whole_frames`: torch's resize, ~2.5x PIL's on x86, where the window falls on
whole pixels); around it the plan's fill colour, mirrored left-right with the flip
(:func:`put`). Used by :mod:`chute.image.batch_decode`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .ops import Plan

__all__ = ["Frames", "place", "put", "whole_frames"]


class Frames(NamedTuple):
    """Where the whole image, resized at the plan's scale, puts each output (see
    :func:`whole_frames`)."""

    ok: np.ndarray  # (B,) bool: the output is a window on whole pixels of that resized image
    shape: np.ndarray  # (B, 2) int64: the resized image's (height, width)
    origin: np.ndarray  # (B, 2) int64: (x, y) of the output's top-left pixel in it


# How many pixels the whole resized image may have, per output pixel it shows, for torch's
# resize of it to beat PIL's resize of the fractional box (torch's is ~2.5x faster).
_FRAME_WASTE = 2.0


def whole_frames(p: Plan, sb: tuple[np.ndarray, ...], heights: Any, widths: Any) -> Frames:
    """Per image of plan ``p`` (made from the stored ``heights`` / ``widths``, decoded where
    ``sb``, its :func:`~chute.image.batch_decode.scaled_boxes`, says): whether resizing the whole
    decoded image at the plan's scale gives a whole number of pixels, with the output's
    window (its box) and the part of the image it shows (``p.inner``) on whole pixels of
    it. Then the output is that window, the fill where the plan pads: torchvision's own two
    steps for ``CenterCrop`` (resize, then crop), and for the letterbox of ``ResizePad`` or
    an uncropped ``ScaleJitter`` the same sampling as PIL's resize of the box (+-1: the two
    round the filter's coefficients their own ways). Only where that image has at most
    ``_FRAME_WASTE`` times the output's pixels."""
    dh, dw, boxes, _ = sb
    oh, ow = p.size
    sx = (boxes[:, 2] - boxes[:, 0]) / ow  # decoded pixels per output pixel
    sy = (boxes[:, 3] - boxes[:, 1]) / oh
    at = np.stack([dh / sy, dw / sx, boxes[:, 0] / sx, boxes[:, 1] / sy], axis=1)
    if p.inner is not None:  # the image's shown part, in output pixels from the box's corner
        fx, fy = dw / np.asarray(widths), dh / np.asarray(heights)
        inner = p.inner * np.stack([fx, fy, fx, fy], axis=1) - boxes[:, [0, 1, 0, 1]]
        at = np.concatenate([at, inner / np.stack([sx, sy, sx, sy], axis=1)], axis=1)
    whole = (np.abs(at - np.rint(at)) < 1e-6).all(axis=1)
    shape = np.rint(at[:, :2]).astype(np.int64)
    ok = whole & (shape.min(axis=1) >= 1) & (shape.prod(axis=1) <= _FRAME_WASTE * oh * ow)
    return Frames(ok, shape, np.rint(at[:, 2:4]).astype(np.int64))


def place(
    image: Any,
    box: list[float],
    dest: list[int],
    fill: tuple[int, int, int],
    flip: bool,
    dst: np.ndarray,
    hwc: np.ndarray,
    paster: Any,
) -> None:
    """``box`` of ``image`` (PIL, RGBX) resized bilinearly into the pixels ``dest`` (x0, y0,
    x1, y1) of ``dst`` (3, H, W), the rest ``fill``; mirrored when ``flip``. ``hwc``: scratch
    of at least H * W * 4 bytes."""
    from PIL import Image

    x0, y0, x1, y1 = dest
    part = hwc.reshape(-1)[: (y1 - y0) * (x1 - x0) * 4].reshape(y1 - y0, x1 - x0, 4)
    if x1 > x0 and y1 > y0:
        paster(part)(image.resize((x1 - x0, y1 - y0), int(Image.Resampling.BILINEAR), box))
    put(dst, part, dest, [-x0, -y0], fill, flip)


def put(
    dst: np.ndarray,
    src: np.ndarray,
    dest: list[int],
    origin: list[int],
    fill: tuple[int, int, int],
    flip: bool,
) -> None:
    """The pixels ``dest`` (x0, y0, x1, y1) of ``dst`` (3, H, W) from ``src`` (h, w, >= 3),
    output pixel ``(y, x)`` from ``src[y + oy, x + ox]`` (``origin``: (ox, oy)), the rest
    ``fill``; mirrored left-right when ``flip``."""
    oh, ow = dst.shape[1:]
    x0, y0, x1, y1 = dest
    if (x0, y0, x1, y1) != (0, 0, ow, oh):
        for c in range(3):
            dst[c] = fill[c]
    if x1 <= x0 or y1 <= y0:
        return
    ox, oy = origin
    part = src[y0 + oy : y1 + oy, x0 + ox : x1 + ox, :3]
    if flip:
        dst[:, y0:y1, ow - x1 : ow - x0] = part[:, ::-1].transpose(2, 0, 1)
    else:
        dst[:, y0:y1, x0:x1] = part.transpose(2, 0, 1)
