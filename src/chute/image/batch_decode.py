"""Decode a batch of stored JPEGs straight into a preallocated ``(B, 3, H, W)`` uint8 batch:
for each image, decode at the smallest DCT scale (1/8, 1/4, 1/2, 1/1) whose decoded crop still
covers the output size, crop + resize (bilinear with antialiasing, as torchvision), flip, and
write into ``out[i]``.

Two resizers, chosen per image. A box on whole decoded pixels (RandomResizedCrop at full
scale: most images) is cropped, then resized by torch's ``interpolate(antialias=True)``, which
is what torchvision's ``RandomResizedCrop`` does (crop, then resize; PIL's coefficients, +-1)
and ~2.5x faster than PIL's resize on x86 (torch's AVX2 kernel for uint8 channels-last
images, which runs in the calling thread: no intra-op pool; it writes channels last too,
then numpy copies the planes into ``out[i]``). A fractional box whose output is a window
on whole pixels of the whole image resized at the plan's scale (a center crop, a letterbox,
an uncropped scale jitter: :func:`chute.image.framing.whole_frames`) has torch resize the
whole image, then the window copied out (and the fill around it). Any other fractional box
(after DCT scaling) goes to PIL's ``resize(box=...)``, which samples it exactly. On
CPUs without AVX2 torch's uint8 kernel is the generic one: PIL resizes every image there, a
whole-pixel crop as a view of the decoded image (the same pixels as torch's, +-1).

Threads: the work runs in C with the GIL released (simplejpeg's decode, the resamplers, PIL's
paste, numpy's copies); what holds the GIL per image is a few calls into them (PIL's core
directly, not its Python wrappers: ~10-20 us against ~0.7 ms of decoding). A plan depends
only on each sample's dataset index, so a batch may be split: ``decode_planned(encoded[a:b],
..., plan_slice(p, a, b), out[a:b])`` from several threads writes the same pixels as one call
for the whole batch. Each thread has its own scratch buffers, kept across calls
(:func:`chute.buffers.thread_scratch`). Measured in
``benchmarks/image_decoders.py`` and ``benchmarks/image_profile.py``.

The encoded images must be what :func:`chute.image.encode_image` stores (JPEG, YCbCr or gray);
other bytes (PNG, CMYK JPEG) take a slower PIL path (``decode_image`` + resize).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import _compat
from ..buffers import thread_scratch
from ..errors import ArgumentError, FormatError, require
from .codec import check_pixels, decode_image, is_jpeg
from .framing import place, put, whole_frames
from .ops import Plan, padded, placed, plan

__all__ = [
    "ScaledBoxes",
    "as_buffers",
    "dct_scales",
    "decode_batch",
    "decode_planned",
    "plan_slice",
    "scaled_boxes",
]

_SCALES = np.array([8, 4, 2, 1])
# torch's uint8 antialiased resize has a SIMD kernel (and one that stays in the calling
# thread) on these; elsewhere PIL resizes every image.
_TORCH_RESIZE = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


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
    upsamples exactly as much as a full decode would); 1 for every image of an ``exact`` plan."""
    if p.exact:
        return np.ones(len(p.boxes), np.int64)
    oh, ow = p.size
    cw = p.boxes[:, 2] - p.boxes[:, 0]
    ch = p.boxes[:, 3] - p.boxes[:, 1]
    room = np.minimum(cw / ow, ch / oh)
    fits = room[:, None] >= _SCALES[None, :]
    return np.asarray(_SCALES[np.argmax(fits, axis=1)] * fits.any(axis=1) + ~fits.any(axis=1))


class ScaledBoxes(NamedTuple):
    """Where each image of a plan is decoded (see :func:`scaled_boxes`)."""

    heights: np.ndarray  # (B,) the decoded size at the DCT scale: ceil(size / scale)
    widths: np.ndarray
    boxes: np.ndarray  # (B, 4) float: the plan's box in decoded pixels
    whole: np.ndarray  # (B,) bool: that box lies on whole pixels (torch's crop-then-resize)


def scaled_boxes(p: Plan, heights: Any, widths: Any) -> ScaledBoxes:
    """Per image of plan ``p`` (made from the stored ``heights`` / ``widths``): the size
    libjpeg-turbo decodes it to at its :func:`dct_scales` scale, and the plan's box in those
    decoded pixels."""
    h = np.asarray(heights, dtype=np.int64).reshape(-1)
    w = np.asarray(widths, dtype=np.int64).reshape(-1)
    d = dct_scales(p)
    dh, dw = -(-h // d), -(-w // d)  # libjpeg-turbo's scaled size: ceil(size / d)
    fx, fy = dw / w, dh / h
    boxes = p.boxes * np.stack([fx, fy, fx, fy], axis=1)
    return ScaledBoxes(dh, dw, boxes, np.abs(boxes - np.rint(boxes)).max(axis=1) < 1e-6)


def plan_slice(p: Plan, a: int, b: int) -> Plan:
    """Samples ``a:b`` of a plan (to decode a batch's slice in another thread)."""
    inner = None if p.inner is None else p.inner[a:b]
    return Plan(p.boxes[a:b], p.flips[a:b], p.size, p.exact, inner, p.fill)


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
    _check_headers(bufs, h, w, indices, sj.decode_jpeg_header)  # before sizing any buffer
    sb = scaled_boxes(p, h, w)
    dh, dw, boxes, exact = sb
    pad = padded(p)
    by_torch = exact & _TORCH_RESIZE & ~pad
    frames = whole_frames(p, sb, h, w)
    framed = frames.ok & _TORCH_RESIZE & ~by_torch
    if pad.any():  # the part of the image each padded output shows, in decoded pixels
        assert p.inner is not None
        fx, fy = dw / w, dh / h
        inner = (p.inner * np.stack([fx, fy, fx, fy], axis=1)).tolist()
    dest = placed(p).tolist()
    shape = frames.shape.tolist()
    origin = frames.origin.tolist()
    # Boxes in decoded pixels, as python floats for PIL (one tolist, not one per number);
    # whole-pixel ones as ints for torch's crop-then-resize (see the module docstring).
    dbox = boxes.tolist()
    ibox = np.rint(boxes).astype(np.int64).tolist()
    dims = np.stack([dh, dw], axis=1).tolist()
    flips = p.flips.tolist()
    # This thread's scratch (chute.buffers.thread_scratch): the decoded image (RGBX for PIL,
    # RGB for torch), torch's crop, and PIL's resized image in HWC order, which PIL pastes
    # into and numpy reads planes from.
    scratch = thread_scratch("decoded", int((dh * dw).max() + dw.max()) * 4)  # + a row: see below
    crop_scratch = thread_scratch("crop", int((dh * dw).max()) * 3 if by_torch.any() else 0)
    frame_scratch = thread_scratch("frame", int(frames.shape.prod(1)[framed].max(initial=0)) * 3)
    hwc = thread_scratch("resized", oh * ow * 4).reshape(oh, ow, 4)
    rgb = thread_scratch("resized_rgb", oh * ow * 3).reshape(oh, ow, 3)  # torch's, channels last
    rgb_out = torch.from_numpy(rgb[None]).permute(0, 3, 1, 2)
    # PIL on raw memory (chute._compat.pil_raw): a view wraps the decoded pixels without a
    # copy; resize and paste run in C with the GIL released. ``paste`` writes into ``hwc``.
    view, paster = _compat.pil_raw()
    paste = paster(hwc)
    # Planes out of ``hwc`` or ``rgb``: numpy's strided copy (GIL released), the flip in the
    # strides.
    straight = hwc[:, :, :3].transpose(2, 0, 1)
    mirrored = hwc[:, ::-1, :3].transpose(2, 0, 1)
    rgb_straight = rgb.transpose(2, 0, 1)
    rgb_mirrored = rgb[:, ::-1].transpose(2, 0, 1)
    # torch's antialiased resize writing into ``rgb_out``, channels last: the kernel's own
    # layout, which skips a repacking pass that a planar output costs (~35 us an image, a
    # quarter of the resize; image_profile.py). See chute._compat.resize_aa.
    copyto, decode_jpeg, resize = np.copyto, sj.decode_jpeg, _compat.resize_aa()
    bilinear = int(Image.Resampling.BILINEAR)
    size = (ow, oh)
    for i in range(n):
        buf = bufs[i]
        ih, iw = dims[i]
        mode = "RGB" if by_torch[i] or framed[i] else "RGBX"
        try:
            if not is_jpeg(buf):
                raise ValueError("not a JPEG")
            pixels = decode_jpeg(buf, mode, min_height=ih, min_width=iw, buffer=scratch)
        except ValueError as exc:
            if "not a JPEG" in str(exc):  # PNG & co: PIL's slow path, full size
                _decode_other(buf, h[i], w[i], plan_slice(p, i, i + 1), out[i], indices, i)
                continue
            if _header_size(sj, buf, ih, iw) not in (None, (ih, iw)):  # larger than stored
                raise FormatError(_where(indices, i) + _mismatch(h[i], w[i])) from None
            raise FormatError(_where(indices, i) + f"corrupt or truncated JPEG: {exc}") from None
        if pixels.shape[0] != ih or pixels.shape[1] != iw:
            raise FormatError(_where(indices, i) + _mismatch(h[i], w[i]))
        if framed[i]:  # the whole image resized by torch, the output a window of it
            rh, rw = shape[i]
            frame = frame_scratch[: rh * rw * 3].reshape(rh, rw, 3)
            src = torch.from_numpy(pixels.transpose(2, 0, 1)[None])
            resize(src, (rh, rw), torch.from_numpy(frame[None]).permute(0, 3, 1, 2))
            put(out[i], frame, dest[i], origin[i], p.fill, flips[i])
            continue
        if pad[i]:  # the shown part resized into its place, the rest the fill colour
            whole = view(pixels, (iw, ih), 0, iw * 4)
            place(whole, inner[i], dest[i], p.fill, flips[i], out[i], hwc, paster)
            continue
        if by_torch[i]:  # crop into a contiguous (h, w, 3) array: torch's kernel takes it as is
            x0, y0, x1, y1 = ibox[i]
            crop = crop_scratch[: (y1 - y0) * (x1 - x0) * 3].reshape(y1 - y0, x1 - x0, 3)
            copyto(crop, pixels[y0:y1, x0:x1])
            # Views made in numpy: each torch call releases and retakes the GIL.
            resize(torch.from_numpy(crop.transpose(2, 0, 1)[None]), p.size, rgb_out)
            copyto(out[i], rgb_mirrored if flips[i] else rgb_straight)
            continue
        if exact[i]:  # no torch: PIL resizes the crop alone, a view (offset, row stride) of
            # ``pixels``, which start ``scratch``; PIL checks offset + stride * rows against
            # the buffer's size, hence its spare row.
            x0, y0, x1, y1 = ibox[i]
            crop_view = view(scratch, (x1 - x0, y1 - y0), (y0 * iw + x0) * 4, iw * 4)
            small = crop_view.resize(size, bilinear, (0, 0, x1 - x0, y1 - y0))
        else:
            small = view(pixels, (iw, ih), 0, iw * 4).resize(size, bilinear, dbox[i])
        paste(small)
        copyto(out[i], mirrored if flips[i] else straight)
    return out


def _decode_other(buf: Any, h: int, w: int, p: Plan, dst: np.ndarray, indices: Any, i: int) -> None:
    """Any other format: a full decode through PIL, then the same crop + resize (one
    sample's plan ``p``)."""
    from PIL import Image

    try:
        chw = decode_image(buf)
    except FormatError as exc:
        raise FormatError(_where(indices, i) + str(exc)) from None
    if chw.shape[1:] != (h, w):
        raise FormatError(
            _where(indices, i) + f"decoded to {chw.shape[1:]}, its stored height/width are {(h, w)}"
        )
    im = Image.fromarray(np.ascontiguousarray(chw.transpose(1, 2, 0))).convert("RGBX")
    if p.inner is not None and padded(p)[0]:
        hwc = np.empty((*p.size, 4), np.uint8)
        place(
            im,
            p.inner[0].tolist(),
            placed(p)[0].tolist(),
            p.fill,
            bool(p.flips[0]),
            dst,
            hwc,
            lambda part: lambda small: np.copyto(part, np.asarray(small)),
        )
        return
    box = p.boxes[0].tolist()
    small = np.asarray(im.resize(dst.shape[:0:-1], Image.Resampling.BILINEAR, box=box))[..., :3]
    dst[...] = (small[:, ::-1] if p.flips[0] else small).transpose(2, 0, 1)


def _header_size(sj: Any, buf: Any, ih: int, iw: int) -> tuple[int, int] | None:
    """The size the JPEG's header says ``buf`` decodes to at the scale chosen for ``(ih,
    iw)`` (None: no readable header). Why a decode failed, asked of the file rather than of
    the words of simplejpeg's message."""
    try:
        height, width, *_ = sj.decode_jpeg_header(buf, min_height=ih, min_width=iw)
    except ValueError:
        return None
    return int(height), int(width)


def _check_headers(
    bufs: Sequence[Any], h: np.ndarray, w: np.ndarray, indices: Any, header: Any
) -> None:
    """Each stored size within the pixel limit, and each JPEG's header (~2 us) agreeing
    with it: the scratch buffers are sized from the stored sizes, so neither a crafted size
    nor a crafted header makes them huge (other formats are checked by PIL's path)."""
    for i, buf in enumerate(bufs):
        try:
            check_pixels(int(h[i]), int(w[i]))
            hw = tuple(header(buf)[:2]) if is_jpeg(buf) else None
        except FormatError as exc:
            raise FormatError(_where(indices, i) + str(exc)) from None
        except ValueError as exc:  # simplejpeg: an unreadable header
            raise FormatError(_where(indices, i) + f"corrupt or truncated JPEG: {exc}") from None
        if hw is not None and hw != (h[i], w[i]):
            raise FormatError(_where(indices, i) + _mismatch(h[i], w[i]))


def _mismatch(h: int, w: int) -> str:
    return f"its stored height/width ({h}, {w}) do not match the JPEG's own"


def _where(indices: Any, i: int) -> str:
    if indices is None:
        return f"image {i} of the batch: "
    return f"sample {int(np.asarray(indices).reshape(-1)[i])} (image {i} of the batch): "
