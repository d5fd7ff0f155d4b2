"""Reading :class:`chute.Image` fields: the encoded batch type, its gather, and ``ds[i]``'s decode.

``ds.gather(idx)`` and ``ds[a:b]`` give an image field as :class:`EncodedImages`: the JPEG
bytes of each sample (values + offsets, as a :class:`chute.RaggedBatch` of bytes would) plus
its stored ``(height, width)``, so crops can be planned without decoding (the loaders'
``decode=`` does that: :mod:`chute.loader.decode`). ``ds[i]`` decodes the image: uint8
``(3, H, W)``, pixel for pixel PIL's ``convert("RGB")``. A corrupt image, or one whose size
disagrees with the stored one, is a :class:`~chute.FormatError` naming the dataset, the field
and the sample.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import format as fmt
from ..errors import ArgumentError, FormatError, SampleIndexError
from .gather import Piece

__all__ = ["EncodedImages", "decode_sample", "gather_images", "slice_images"]


class EncodedImages(NamedTuple):
    """A batch of an image field, not decoded: sample ``i`` is the JPEG
    ``values[offsets[i]:offsets[i+1]]`` (uint8) of an image of ``sizes[i]`` = (height,
    width) (int32). ``len()`` is the batch size, ``eb[i]`` sample ``i``'s bytes (a uint8
    tensor view), ``eb.tolist()`` all of them; ``eb.decode(i)`` decodes one. As with
    :class:`chute.RaggedBatch`, unpacking and iteration give the three members: a NamedTuple
    of tensors, so ``pin_memory``, ``to_device`` and ``default_collate`` move it like one."""

    values: torch.Tensor
    offsets: torch.Tensor
    sizes: torch.Tensor

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:  # type: ignore[override]
        if isinstance(i, slice):
            return [self.sample(k) for k in range(*i.indices(len(self)))]
        return self.sample(i)

    def sample(self, i: Any) -> torch.Tensor:
        """The encoded bytes of sample ``i`` (negative counts from the end), as a view."""
        try:
            k = operator.index(i)
        except TypeError:
            raise ArgumentError(
                f"EncodedImages is indexed by an int or a slice, not {type(i).__name__}"
            ) from None
        n = len(self)
        if not -n <= k < n:
            raise SampleIndexError(f"sample {k} is out of range for a batch of {n}")
        k %= n
        return self.values[int(self.offsets[k]) : int(self.offsets[k + 1])]

    def tolist(self) -> list[torch.Tensor]:
        """The encoded bytes of each sample, as views (iterating gives the three members)."""
        return [self.sample(i) for i in range(len(self))]

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


def _checked_sizes(sizes: np.ndarray, where: Path | str) -> np.ndarray:
    if len(sizes) and sizes.min() < 1:
        bad = int(np.flatnonzero((sizes < 1).any(axis=1))[0])
        raise FormatError(
            f"{where}: a stored image size {sizes[bad].tolist()} is not positive; the dataset "
            "is corrupt"
        )
    return sizes


def gather_images(pieces: Sequence[Piece], f: fmt.Image, b: int, where: str) -> EncodedImages:
    """The ``b`` samples of image field ``f`` that ``pieces`` locate, in the batch's order.

    One slice copy per image (``np.concatenate`` of the samples' byte ranges), not
    ``gather_var``'s flat index of every byte: an image is tens of kilobytes, and an int64
    index per byte cost more than decoding it. Offsets are checked to lie in order inside the
    values (else a FormatError naming the file, as ``gather_var`` does)."""
    chunks: list[Any] = [None] * b
    sizes = np.empty((b, 2), np.int32)
    for piece in pieces:
        col, local = piece.arrays, piece.local
        values, offsets = col["values"], col["offsets"]
        starts, ends = offsets[local], offsets[local + 1]
        if len(local) and ((ends < starts).any() or starts.min() < 0 or ends.max() > len(values)):
            bad = int(local[((ends < starts) | (starts < 0) | (ends > len(values)))][0])
            raise FormatError(
                f"{piece.files['offsets']}: offsets of sample {bad} of this part are invalid "
                f"({int(offsets[bad])}..{int(offsets[bad + 1])} of {len(values)} values); the "
                "dataset is corrupt"
            )
        pos = range(b) if piece.pos is None else piece.pos.tolist()
        for k, s, e in zip(pos, starts.tolist(), ends.tolist(), strict=True):
            chunks[k] = values[s:e]
        rows = _checked_sizes(np.take(col["sizes"], local, axis=0), piece.files["sizes"])
        sizes[slice(None) if piece.pos is None else piece.pos] = rows
    out_offsets = np.zeros(b + 1, np.int64)
    np.cumsum([len(c) for c in chunks], out=out_offsets[1:])
    data = np.concatenate(chunks) if b else np.zeros(0, np.uint8)
    return EncodedImages(
        torch.from_numpy(data), torch.from_numpy(out_offsets), torch.from_numpy(sizes)
    )


def slice_images(
    values: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, where: Path
) -> EncodedImages:
    """``ds[a:b]`` of an image field inside one part: values, 0-based offsets, sizes rows."""
    sizes = _checked_sizes(np.array(sizes, np.int32), where)
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
    try:
        chw = decode_image(data)
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
    if chw.shape[1:] != tuple(size.tolist()):
        raise FormatError(
            f"{where}: the image decodes to {chw.shape[1:]} but its stored size is "
            f"{tuple(size.tolist())}; the dataset is corrupt"
        )
    return torch.from_numpy(chw)
