"""Encode images for storage and decode them back: what an image field holds per sample is the
encoded bytes (JPEG) plus its height and width, so crops can be planned without decoding.

- :func:`encode_image` takes a PIL image, encoded bytes (any format PIL reads) or a uint8
  array, and returns ``(jpeg_bytes, height, width)``. A JPEG that is already RGB/grayscale,
  has no EXIF rotation and fits in ``max_side`` is kept byte for byte (no re-encode, no quality
  loss); anything else is converted to RGB, shrunk so its longer side is ``max_side``, and
  encoded at ``quality``.
- :func:`jpeg_size` reads ``(height, width)`` from a JPEG header without decoding.
- :func:`decode_image` decodes to uint8 ``(3, H, W)``, pixel for pixel what PIL gives.

Colour: everything comes out RGB exactly as PIL's ``convert("RGB")`` makes it: grayscale is
replicated, CMYK goes through PIL's conversion, palette images take their palette colours, and
**alpha is dropped, not composited** (a transparent pixel keeps whatever colour it stores).
Orientation: the EXIF orientation tag is applied (``ImageOps.exif_transpose``) before
anything else, so the stored image is upright and its stored height/width are those of the
upright image; the tag itself is not kept (the stored JPEG has no EXIF).

Decompression bombs: no image larger than :func:`max_pixels` (twice PIL's
``Image.MAX_IMAGE_PIXELS``, where PIL itself refuses one: 179 Mpx by default; raise that
setting to accept bigger images) is decoded, and the size is read from the header first, so a
small file whose header claims a huge image is a :class:`chute.FormatError` before any pixel
is allocated.

JPEG decoding uses simplejpeg (libjpeg-turbo; releases the GIL, 1.7x Pillow's decode on
photos: ``benchmarks/image_decoders.py``); both are in ``pip install 'chute[image]'``.
"""

from __future__ import annotations

import io
import warnings
from typing import Any, NamedTuple

import numpy as np

from ..errors import ArgumentError, FormatError, require

__all__ = ["EncodedImage", "decode_image", "encode_image", "is_jpeg", "jpeg_size"]


class EncodedImage(NamedTuple):
    """What :func:`encode_image` returns and a :class:`chute.fields.Image` field stores per sample:
    the JPEG bytes and the upright image's height and width. A :class:`chute.Writer` stores
    one as it is, after :func:`check_encoded` (its header agrees with its height and width),
    so encoding can happen elsewhere, e.g. in a pool of threads
    (:func:`chute.from_image_folder` does)."""

    data: bytes
    height: int
    width: int


_SOI = b"\xff\xd8\xff"
# JPEG colour spaces (as simplejpeg names them) that decode to RGB exactly as PIL's
# convert("RGB") does; CMYK/YCCK JPEGs are re-encoded through PIL's own conversion.
_KEEP_COLORSPACES = ("YCbCr", "Gray")


def _simplejpeg() -> Any:
    return require("simplejpeg", "image")


def _pil() -> Any:
    return require("PIL.Image", "image")


def is_jpeg(data: Any) -> bool:
    """Whether ``data`` (a bytes-like object) starts like a JPEG file."""
    return bytes(memoryview(data)[:3]) == _SOI


def jpeg_size(data: Any) -> tuple[int, int]:
    """``(height, width)`` of a JPEG, read from its header (no pixel is decoded)."""
    try:
        h, w, _, _ = _simplejpeg().decode_jpeg_header(data)
    except ValueError as exc:
        raise FormatError(f"not a readable JPEG header: {exc}") from None
    return int(h), int(w)


def max_pixels() -> int | None:
    """The most pixels (height * width) of an image chute decodes: twice PIL's
    ``Image.MAX_IMAGE_PIXELS`` (where PIL raises ``DecompressionBombError``), read at each
    call; None when that setting is None (no limit)."""
    limit = _pil().MAX_IMAGE_PIXELS
    return None if limit is None else 2 * int(limit)


def check_pixels(height: int, width: int) -> None:
    """Refuse an image over :func:`max_pixels` (or of a size that is not positive) with a
    :class:`chute.FormatError`, before anything is allocated for it."""
    limit = max_pixels()
    if height < 1 or width < 1:
        raise FormatError(f"an image of {height}x{width} pixels: its size must be positive")
    if limit is not None and height * width > limit:
        raise FormatError(
            f"an image of {height}x{width} ({height * width:,} pixels) is over the limit of "
            f"{limit:,} pixels (a decompression bomb?); raise PIL.Image.MAX_IMAGE_PIXELS "
            "(half the limit) to accept it"
        )


def check_encoded(e: EncodedImage) -> None:
    """Refuse an :class:`EncodedImage` whose height and width are not positive ints that its
    bytes' header agrees with (read without decoding, ~2 us), or over :func:`max_pixels`:
    loaders plan crops and size buffers from the stored sizes."""
    h, w = e.height, e.width
    if not isinstance(e.data, (bytes, bytearray)):
        raise FormatError(f"an EncodedImage holds bytes, not {type(e.data).__name__}")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (h, w)):
        raise FormatError(f"an EncodedImage's height and width are ints, got {h!r} and {w!r}")
    check_size(e.data, (int(h), int(w)))


def check_size(data: Any, size: tuple[int, int]) -> None:
    """Refuse encoded bytes whose header (JPEG, or any format PIL reads) disagrees with
    ``size`` (a stored ``(height, width)``), or is over :func:`max_pixels`: a
    :class:`chute.FormatError`, with nothing decoded."""
    if is_jpeg(data):
        hw = jpeg_size(data)
    else:
        im = _open_header(data)
        hw = (im.size[1], im.size[0])
    _check_header(hw, size)


def decode_image(data: Any, size: tuple[int, int] | None = None) -> np.ndarray:
    """Decode an encoded image to uint8 ``(3, H, W)`` RGB, equal to PIL's
    ``np.asarray(Image.open(...).convert("RGB"))`` moved channels first. JPEGs go through
    simplejpeg (GIL released), other formats through PIL. A corrupt or truncated image, one
    over :func:`max_pixels`, or one whose header disagrees with ``size`` (its stored
    ``(height, width)``, when given) raises :class:`chute.FormatError` before decoding."""
    if is_jpeg(data):
        _check_header(jpeg_size(data), size)
        try:
            hw3 = _simplejpeg().decode_jpeg(data, "RGB")
        except ValueError as exc:
            raise FormatError(f"corrupt or truncated JPEG: {exc}") from None
    else:
        hw3 = np.asarray(_open(data, size).convert("RGB"))
    return np.ascontiguousarray(hw3.transpose(2, 0, 1))


def _check_header(hw: tuple[int, int], size: tuple[int, int] | None) -> None:
    if size is not None and tuple(size) != hw:
        raise FormatError(
            f"its header says {hw[0]}x{hw[1]} but its stored size is {size[0]}x{size[1]}"
        )
    check_pixels(*hw)


def _open(data: Any, size: tuple[int, int] | None = None) -> Any:
    """A fully loaded PIL image from encoded bytes, its header checked first (errors ->
    FormatError)."""
    im = _open_header(data)
    _check_header((im.size[1], im.size[0]), size)
    try:
        im.load()
    except (OSError, ValueError, SyntaxError) as exc:
        raise FormatError(f"not a decodable image: {exc}") from None
    return im


def encode_image(x: Any, max_side: int | None = None, quality: int = 90) -> EncodedImage:
    """Encode one image for storage; returns ``(jpeg_bytes, height, width)`` (an
    :class:`EncodedImage`).

    ``x``: a PIL image, encoded bytes of any format PIL reads, or a uint8 array ``(H, W, 3)``,
    ``(3, H, W)`` or ``(H, W)``. See the module docstring for what is kept as is and what is
    converted. Raises :class:`chute.FormatError` for bytes that are not a decodable image and
    :class:`chute.ArgumentError` for other types.
    """
    if max_side is not None and (type(max_side) is not int or max_side < 1):
        raise ArgumentError(f"max_side must be a positive int or None, got {max_side!r}")
    if type(quality) is not int or not 1 <= quality <= 100:
        raise ArgumentError(f"quality must be an int in 1..100, got {quality!r}")
    Image = _pil()
    if isinstance(x, (bytes, bytearray, memoryview)):
        data = bytes(x)
        if is_jpeg(data):
            kept = _keep_as_is(data, max_side)
            if kept is not None:
                return EncodedImage(data, kept[0], kept[1])
        im = _open_for_encode(data, max_side)
    elif isinstance(x, Image.Image):
        im = x
    elif isinstance(x, np.ndarray) or hasattr(x, "__array__"):
        im = Image.fromarray(_hwc(np.asarray(x)))
    else:
        raise ArgumentError(
            f"an image must be a PIL image, encoded bytes or a uint8 array, not {type(x).__name__}"
        )
    return _encode(_upright_rgb(im), max_side, quality)


def _keep_as_is(data: bytes, max_side: int | None) -> tuple[int, int] | None:
    """``(h, w)`` when the JPEG ``data`` can be stored unchanged, else None. It must decode
    fully (a truncated file is caught here, decoded at 1/8 scale to be quick: the entropy
    decoding still reads every byte; ``min_factor`` would not scale), be YCbCr or gray,
    within :func:`max_pixels`, fit ``max_side`` and carry no EXIF rotation."""
    sj = _simplejpeg()
    try:
        h, w, colorspace, _ = sj.decode_jpeg_header(data)
        check_pixels(h, w)
        sj.decode_jpeg(data, "RGB", min_height=1, min_width=1)
    except ValueError as exc:
        raise FormatError(f"corrupt or truncated JPEG: {exc}") from None
    if colorspace not in _KEEP_COLORSPACES or (max_side is not None and max(h, w) > max_side):
        return None
    if _orientation(data) not in (None, 1):
        return None
    return int(h), int(w)


def _orientation(data: bytes) -> int | None:
    """The EXIF orientation tag of a JPEG, None without one (reads the header only)."""
    im = _open_header(data)
    return im.getexif().get(0x0112)


def _open_header(data: Any) -> Any:
    """A PIL image of encoded bytes with only its header read (errors, and PIL's own
    ``DecompressionBombError``, -> FormatError)."""
    Image = _pil()
    try:
        return Image.open(io.BytesIO(data))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise FormatError(f"not a decodable image: {exc}") from None


def _open_for_encode(data: bytes, max_side: int | None) -> Any:
    """Open and load encoded bytes (the header checked first); a JPEG larger than needed is
    decoded DCT-scaled (``draft``), never below ``max_side`` on either side."""
    im = _open_header(data)
    check_pixels(im.size[1], im.size[0])
    if max_side is not None and im.format == "JPEG":
        im.draft(im.mode, (max_side, max_side))
    try:
        im.load()
    except (OSError, ValueError, SyntaxError) as exc:
        raise FormatError(f"corrupt or truncated image: {exc}") from None
    return im


def _hwc(a: np.ndarray) -> np.ndarray:
    if a.dtype != np.uint8:
        raise ArgumentError(f"an image array must be uint8, not {a.dtype}")
    if a.ndim == 3 and a.shape[0] in (1, 3) and a.shape[-1] not in (1, 3):
        a = a.transpose(1, 2, 0)  # (C, H, W) -> (H, W, C)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] == 3)):
        raise ArgumentError(
            f"an image array must be (H, W, 3), (3, H, W) or (H, W), got shape {a.shape}"
        )
    return np.ascontiguousarray(a)


def _upright_rgb(im: Any) -> Any:
    from PIL import ImageOps

    im = ImageOps.exif_transpose(im)
    if im.mode != "RGB":
        with warnings.catch_warnings():  # "Palette images with Transparency ...": alpha is
            warnings.simplefilter("ignore", UserWarning)  # dropped on purpose (see above)
            im = im.convert("RGB")
    return im


def _encode(im: Any, max_side: int | None, quality: int) -> EncodedImage:
    Image = _pil()
    w, h = im.size
    if max_side is not None and max(h, w) > max_side:
        scale = max_side / max(h, w)
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        im = im.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
        w, h = im.size
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    return EncodedImage(buf.getvalue(), h, w)
