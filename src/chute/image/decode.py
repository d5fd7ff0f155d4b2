"""Decode a batch of stored JPEGs straight into a preallocated ``(B, 3, H, W)`` uint8 batch:
for each image, decode at the smallest DCT scale (1/8, 1/4, 1/2, 1/1) whose decoded crop still
covers the output size, crop + resize in one step (PIL ``resize(box=...)``, bilinear with
antialiasing, as torchvision's PIL path), flip, and write into ``out[i]``.

Threads: the work runs in C with the GIL released (simplejpeg's decode, PIL's resample and
paste, numpy's copy into ``out``); what holds the GIL per image is a few calls into them (PIL's
core directly, not its Python wrappers: ~10 us against ~1 ms of decoding). No pixel is packed
or copied with the GIL held (PIL's raw packer, used before, held it: ~20 us per image that two
threads had to take turns at). A plan depends only on each sample's dataset index, so a batch
may be split: ``decode_planned(encoded[a:b], ..., plan_slice(p, a, b), out[a:b])`` from
several threads writes the same pixels as one call for the whole batch. Each call owns its
scratch buffers.

Why PIL for the resize and not torch's ``interpolate(antialias=True)``: the box is fractional
after DCT scaling (PIL samples it exactly; torch needs an integer crop), and torch ops called
from several threads share torch's intra-op pool (a global setting). cv2 is not a dependency.
Measured in ``benchmarks/image_decoders.py``.

The encoded images must be what :func:`chute.image.encode_image` stores (JPEG, YCbCr or gray);
other bytes (PNG, CMYK JPEG) take a slower PIL path (``decode_image`` + resize).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, FormatError, require
from .codec import decode_image, is_jpeg
from .ops import Plan, plan

__all__ = ["as_buffers", "dct_scales", "decode_batch", "decode_planned", "plan_slice"]

_SCALES = np.array([8, 4, 2, 1])


def as_buffers(encoded: Any) -> Sequence[Any]:
    """The per-sample byte buffers of ``encoded``: a sequence of bytes-like objects, or a
    ragged batch ``(values, offsets[, shapes])`` (``chute.RaggedBatch`` or numpy/torch arrays;
    sample ``i`` is ``values[offsets[i]:offsets[i+1]]``), sliced as zero-copy memoryviews."""
    values = getattr(encoded, "values", None)
    offsets = getattr(encoded, "offsets", None)
    if values is None and isinstance(encoded, tuple) and len(encoded) in (2, 3):
        values, offsets = encoded[0], encoded[1]
    if values is None or offsets is None or callable(values):
        return encoded  # already a sequence of buffers
    v = values.numpy() if hasattr(values, "numpy") else np.asarray(values)
    o = (offsets.numpy() if hasattr(offsets, "numpy") else np.asarray(offsets)).tolist()
    mv = memoryview(np.ascontiguousarray(v).reshape(-1).view(np.uint8).data)
    return [mv[o[i] : o[i + 1]] for i in range(len(o) - 1)]


def dct_scales(p: Plan) -> np.ndarray:
    """Per image, the DCT scale denominator (8, 4, 2 or 1): the largest whose decoded crop is
    still at least the output size on both sides (so the resize only ever shrinks, or
    upsamples exactly as much as a full decode would)."""
    oh, ow = p.size
    cw = p.boxes[:, 2] - p.boxes[:, 0]
    ch = p.boxes[:, 3] - p.boxes[:, 1]
    room = np.minimum(cw / ow, ch / oh)
    fits = room[:, None] >= _SCALES[None, :]
    return np.asarray(_SCALES[np.argmax(fits, axis=1)] * fits.any(axis=1) + ~fits.any(axis=1))


def plan_slice(p: Plan, a: int, b: int) -> Plan:
    """Samples ``a:b`` of a plan (to decode a batch's slice in another thread)."""
    return Plan(p.boxes[a:b], p.flips[a:b], p.size)


def decode_batch(
    encoded: Any,
    heights: Any,
    widths: Any,
    ops: Any,
    indices: Any,
    seed: int,
    epoch: int,
    out: np.ndarray,
) -> np.ndarray:
    """Plan (:func:`chute.image.plan`) then decode a batch into ``out`` (B, 3, H, W) uint8,
    in place; returns ``out``. See :func:`decode_planned`."""
    p = plan(ops, heights, widths, indices, seed, epoch)
    return decode_planned(encoded, heights, widths, p, out, indices)


def decode_planned(
    encoded: Any,
    heights: Any,
    widths: Any,
    p: Plan,
    out: np.ndarray,
    indices: Any = None,
) -> np.ndarray:
    """Decode, crop, resize and flip each image as ``p`` says, writing ``out[i]`` in place.

    ``encoded``: see :func:`as_buffers`; ``heights``/``widths``: the stored sizes the plan was
    made from; ``out``: C-contiguous uint8 ``(B, 3, *p.size)`` (a slice ``out[a:b]`` of a
    bigger batch is fine); ``indices``: only to name the sample in an error. A corrupt image
    raises :class:`chute.FormatError` naming its position and index in the batch.
    """
    sj = require("simplejpeg", "image")
    Image = require("PIL.Image", "image")
    bufs = as_buffers(encoded)
    n = len(bufs)
    oh, ow = p.size
    if not (isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.shape == (n, 3, oh, ow)):
        raise ArgumentError(
            f"out must be a uint8 numpy array of shape {(n, 3, oh, ow)}, got "
            f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}"
        )
    if len(p.boxes) != n:
        raise ArgumentError(f"the plan has {len(p.boxes)} images, encoded has {n}")
    if n == 0:
        return out
    h = np.asarray(heights, dtype=np.int64).reshape(-1)
    w = np.asarray(widths, dtype=np.int64).reshape(-1)
    d = dct_scales(p)
    dh, dw = -(-h // d), -(-w // d)  # libjpeg-turbo's scaled size: ceil(size / d)
    # Boxes in decoded pixels, as python floats for PIL (one tolist, not one per number).
    fx, fy = dw / w, dh / h
    dbox = (p.boxes * np.stack([fx, fy, fx, fy], axis=1)).tolist()
    dims = np.stack([dh, dw], axis=1).tolist()
    flips = p.flips.tolist()
    # This call's own scratch (a thread's, when a batch is split): the decoded RGBX image,
    # and the resized one in HWC order, which PIL pastes into and numpy reads planes from.
    scratch = np.empty(int((dh * dw).max()) * 4, np.uint8)
    hwc = np.empty((oh, ow, 4), np.uint8)
    # PIL's core (what Image.frombuffer / resize / paste call, without their Python checks):
    # map_buffer wraps the decoded pixels without a copy; resize and paste run in C with the
    # GIL released. ``hwc``'s core image shares its memory.
    map_buffer = Image.core.map_buffer
    raw = ("RGBX", 0, 1)
    paste = map_buffer(hwc, (ow, oh), "raw", 0, raw).paste
    extent = (0, 0, ow, oh)
    # Planes out of ``hwc``: numpy's strided copy (GIL released), the flip in the strides.
    straight = hwc[:, :, :3].transpose(2, 0, 1)
    mirrored = hwc[:, ::-1, :3].transpose(2, 0, 1)
    copyto, decode_jpeg = np.copyto, sj.decode_jpeg
    bilinear = int(Image.Resampling.BILINEAR)
    size = (ow, oh)
    for i in range(n):
        buf = bufs[i]
        ih, iw = dims[i]
        try:
            if not is_jpeg(buf):
                raise ValueError("not a JPEG")
            rgbx = decode_jpeg(buf, "RGBX", min_height=ih, min_width=iw, buffer=scratch)
        except ValueError as exc:
            rgbx = None
            if "not a JPEG" in str(exc):  # PNG & co: PIL's slow path, full size
                _decode_other(buf, h[i], w[i], p.boxes[i], flips[i], out[i], indices, i)
                continue
            if "too small" in str(exc):  # larger than its stored size says
                raise FormatError(_where(indices, i) + _mismatch(h[i], w[i])) from None
            raise FormatError(_where(indices, i) + f"corrupt or truncated JPEG: {exc}") from None
        if rgbx.shape[0] != ih or rgbx.shape[1] != iw:
            raise FormatError(_where(indices, i) + _mismatch(h[i], w[i]))
        paste(map_buffer(rgbx, (iw, ih), "raw", 0, raw).resize(size, bilinear, dbox[i]), extent)
        copyto(out[i], mirrored if flips[i] else straight)
    return out


def _decode_other(
    buf: Any, h: int, w: int, box: np.ndarray, flip: bool, dst: np.ndarray, indices: Any, i: int
) -> None:
    """Any other format: a full decode through PIL, then the same crop + resize."""
    from PIL import Image

    try:
        chw = decode_image(buf)
    except FormatError as exc:
        raise FormatError(_where(indices, i) + str(exc)) from None
    if chw.shape[1:] != (h, w):
        raise FormatError(
            _where(indices, i) + f"decoded to {chw.shape[1:]}, its stored height/width are {(h, w)}"
        )
    im = Image.fromarray(np.ascontiguousarray(chw.transpose(1, 2, 0)))
    small = np.asarray(im.resize(dst.shape[:0:-1], Image.Resampling.BILINEAR, box=box.tolist()))
    dst[...] = (small[:, ::-1] if flip else small).transpose(2, 0, 1)


def _mismatch(h: int, w: int) -> str:
    return f"its stored height/width ({h}, {w}) do not match the JPEG's own"


def _where(indices: Any, i: int) -> str:
    if indices is None:
        return f"image {i} of the batch: "
    return f"sample {int(np.asarray(indices).reshape(-1)[i])} (image {i} of the batch): "
