"""Reading :class:`chute.fields.Image` fields: the encoded batch type, its gather, and
``ds[i]``'s decode.

``ds.gather(idx)`` and ``ds[a:b]`` give an image field as :class:`EncodedImages`: the JPEG
bytes of each sample (values + offsets, as a :class:`chute.RaggedBatch` of bytes would) plus
its stored ``(height, width)``, so crops can be planned without decoding (the loaders'
``decode=`` does that: :mod:`chute.loader.decode`). ``ds[i]`` decodes the image: uint8
``(3, H, W)``, pixel for pixel PIL's ``convert("RGB")``. A corrupt image, or one whose size
disagrees with the stored one, is a :class:`~chute.FormatError` naming the dataset, the field
and the sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..batch import RaggedBatch
from ..buffers import thread_bytes
from ..errors import FormatError
from .gather import Piece, gather_var

__all__ = ["EncodedImages", "decode_sample", "gather_images", "slice_images"]


class EncodedImages(RaggedBatch):
    """A batch of an image field, not decoded: a :class:`chute.RaggedBatch` of the JPEG bytes
    (sample ``i`` is ``values[offsets[i]:offsets[i+1]]``, ``for jpeg in eb`` loops over the
    samples) plus ``sizes`` (B, 2) int32, each image's stored (height, width), so crops can be
    planned without decoding. ``eb.decode(i)`` decodes one. Its parts are ``values``,
    ``offsets`` and ``sizes`` (``_fields``); ``pin_memory``, ``default_collate``, pytree and
    ``chute.to_device`` keep it an EncodedImages."""

    __slots__ = ("sizes",)
    _fields = ("values", "offsets", "sizes")  # type: ignore[assignment]

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor, sizes: torch.Tensor) -> None:
        super().__init__(values, offsets)
        self.sizes = sizes

    def decode(self, i: int) -> torch.Tensor:
        """Sample ``i`` decoded: uint8 ``(3, H, W)``."""
        from ..image.codec import decode_image

        return torch.from_numpy(decode_image(self.sample(i).numpy()))

    @property
    def heights(self) -> torch.Tensor:
        return self.sizes[:, 0]

    @property
    def widths(self) -> torch.Tensor:
        return self.sizes[:, 1]

    def _asdict(self) -> dict[str, torch.Tensor | None]:
        return {"values": self.values, "offsets": self.offsets, "sizes": self.sizes}

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> EncodedImages:
        return EncodedImages(fn(self.values), fn(self.offsets), fn(self.sizes))

    def __reduce__(self) -> tuple[Any, ...]:
        return EncodedImages, (self.values, self.offsets, self.sizes)

    def __repr__(self) -> str:
        return f"chute.EncodedImages({len(self)} images, {len(self.values):,} bytes)"


def _checked_sizes(sizes: np.ndarray, files: Mapping[str, Path]) -> np.ndarray:
    if len(sizes) and sizes.min() < 1:
        bad = int(np.flatnonzero((sizes < 1).any(axis=1))[0])
        raise FormatError(
            f"{files['sizes']}: a stored image size {sizes[bad].tolist()} is not positive; the "
            "dataset is corrupt"
        )
    return sizes


def gather_images(pieces: Sequence[Piece], b: int) -> EncodedImages:
    """The ``b`` samples of an image field that ``pieces`` locate, in the batch's order: the
    bytes by the reader's ragged gather (one slice copy per image, checked offsets, bounded
    memory), the sizes put at their positions."""
    data = gather_var(pieces, "uint8", (), b, thread_bytes)
    sizes = np.empty((b, 2), np.int32)
    for piece in pieces:
        rows = _checked_sizes(np.take(piece.arrays["sizes"], piece.local, axis=0), piece.files)
        sizes[slice(None) if piece.pos is None else piece.pos] = rows
    return EncodedImages(data.values, data.offsets, torch.from_numpy(sizes))


def slice_images(
    values: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, files: Mapping[str, Path]
) -> EncodedImages:
    """``ds[a:b]`` of an image field inside one part: values, 0-based offsets, sizes rows
    (``files``: the field's files in the part, named in errors)."""
    sizes = _checked_sizes(np.array(sizes, np.int32), files)
    return EncodedImages(
        torch.from_numpy(np.array(values)), torch.from_numpy(offsets), torch.from_numpy(sizes)
    )


def decode_sample(
    data: np.ndarray, size: np.ndarray, dataset: Any, name: str, index: int
) -> torch.Tensor:
    """``ds[i]`` of an image field: the stored bytes ``data`` decoded to uint8 ``(3, H, W)``,
    checked against the stored ``size``; else a FormatError naming dataset, field and sample."""
    from ..image.codec import decode_image

    where = f"{dataset}: field {name!r}, sample {index}"
    stored = (int(size[0]), int(size[1]))
    try:  # the header is checked against the stored size (and the pixel limit) first
        chw = decode_image(data, stored)
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
    if chw.shape[1:] != stored:
        raise FormatError(
            f"{where}: the image decodes to {chw.shape[1:]} but its stored size is "
            f"{stored}; the dataset is corrupt"
        )
    return torch.from_numpy(chw)
