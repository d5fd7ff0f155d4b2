"""Images a source stores (image folders, image columns of tables, WebDataset members): read
with a size bound, encoded once with :func:`chute.image.encode_image` (a JPEG within
``max_side`` kept byte for byte), a failure raised naming where it happened or, with
``on_error="skip"``, returned as its reason so the source can leave the sample out and list it.
A missing image library (:class:`chute.MissingDependencyError`) is raised at once, never a
reason to skip.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, ChuteError, MissingDependencyError, SourceError
from ..image.codec import EncodedImage, encode_image

MAX_IMAGE_BYTES = 256 << 20  # a bigger "image" is refused before it is read
ON_ERROR = ("raise", "skip")
SKIP_HINT = "pass on_error='skip' to leave it out (it is then listed in the metadata)"


def check_on_error(on_error: str) -> str:
    """``on_error`` itself, or an :class:`~chute.ArgumentError`."""
    if on_error not in ON_ERROR:
        raise ArgumentError(f'on_error must be "raise" or "skip", got {on_error!r}')
    return on_error


def read_image_file(path: Path) -> bytes:
    """The bytes of an image file, at most :data:`MAX_IMAGE_BYTES`."""
    with open(path, "rb") as f:
        data = f.read(MAX_IMAGE_BYTES + 1)
    if len(data) > MAX_IMAGE_BYTES:
        raise SourceError(f"larger than {MAX_IMAGE_BYTES >> 20} MiB; not read")
    return data


def encode(
    image: bytes | Path, max_side: int | None, quality: int, on_error: str, where: str
) -> EncodedImage | str:
    """``image`` (encoded bytes, or a file to read) encoded for an Image field; when it fails,
    the reason (``on_error="skip"``) or a :class:`~chute.SourceError` naming ``where``."""
    try:
        data = read_image_file(image) if isinstance(image, Path) else image
        return encode_image(data, max_side, quality)
    except MissingDependencyError:  # nothing wrong with the image: no image is skipped for it
        raise
    except (ChuteError, OSError) as exc:
        if on_error == "skip":
            return f"{type(exc).__name__}: {exc}"
        raise SourceError(f"{where}: {exc}; fix or remove it, or {SKIP_HINT}") from None


def is_pil(value: Any) -> bool:
    """Whether ``value`` is a PIL image (without importing PIL)."""
    pil = sys.modules.get("PIL.Image")  # only loaded if the caller uses PIL
    return pil is not None and isinstance(value, pil.Image)


def warn_pixels(source: str, field: str) -> None:
    """Say that the PIL images of ``field`` are stored as pixels, and how to keep JPEGs."""
    warnings.warn(
        f"{source}: field {field!r} holds PIL images, stored as their uint8 pixels (lossless, "
        f"about 10x a JPEG's bytes); to store JPEGs pass "
        f"schema={{{field!r}: chute.fields.Image()}}",
        stacklevel=5,
    )
