"""The ``mask`` kind: a per-pixel label map per sample (segmentation), stored losslessly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import FormatError, SchemaError
from ..format.spec import json_dtype
from .ragged import Ragged

MASK_DTYPES = ("uint8", "uint16", "int32")


@dataclass(frozen=True)
class Mask(Ragged):
    """A ``(height, width)`` map of class ids per sample, stored raw (never JPEG: every id is
    read back exactly), so segmentation masks of any size can sit next to an
    :class:`chute.fields.Image`. ``ds[i]`` gives the ``(H, W)`` array; ``gather`` a
    :class:`chute.RaggedBatch` with ``shapes`` (B, 2), the stored (height, width).

    In the loaders, ``decode={"image": ops, "mask": chute.Follow("image")}`` crops, resizes
    (nearest neighbour) and flips it exactly as the image of the same sample (see
    :mod:`chute.loader.decode`). Written from 2-D arrays of ``dtype`` (uint8, uint16 or
    int32). Stored as a Ragged field of that
    dtype: ``NAME.values.npy``, ``NAME.offsets.npy``, ``NAME.shapes.npy`` (N x 2).

    ``instances=True``: instance masks, an ``(N, H, W)`` stack of planes per sample (one per
    object, ``N`` varying from sample to sample, 0 included; Mask R-CNN's targets), stored
    alike with ``shapes`` (N x 3). A ``Follow`` moves each plane as a 2-D mask and gives a
    :class:`chute.RaggedBatch` whose sample ``i`` is its ``(N_i, H', W')`` planes.
    """

    dtype: str = "uint8"
    inner_shape: tuple[int | None, ...] = field(default=(None,), init=False)
    instances: bool = False
    kind: ClassVar[str] = "mask"
    numeric: ClassVar[bool] = False  # class ids, not tokens or a tensor to merge with

    def __post_init__(self) -> None:
        if not isinstance(self.instances, bool):
            raise SchemaError(f"Mask: instances must be True or False, got {self.instances!r}")
        object.__setattr__(self, "inner_shape", (None, None) if self.instances else (None,))
        super().__post_init__()
        if self.dtype not in MASK_DTYPES:
            raise SchemaError(f"Mask: dtype must be one of {MASK_DTYPES}, got {self.dtype!r}")

    def to_json(self) -> dict[str, Any]:
        extra = {"instances": True} if self.instances else {}
        return {"kind": self.kind, "dtype": self.dtype, **extra}

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> Mask:
        try:
            return cls(json_dtype(name, obj), instances=obj.get("instances", False))
        except SchemaError as exc:
            raise FormatError(f"field {name!r}: {exc}") from None

    def describe(self) -> str:
        return f"mask {self.dtype} ({'?, ' if self.instances else ''}?, ?)"
