"""The ``image`` kind: encoded image bytes per sample plus its height and width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..columns.encoded_images import decode_sample, gather_images, slice_images
from ..columns.gather import FieldPart, Piece, batch_pieces, part_values
from ..columns.image_values import prepare_images
from ..columns.source_images import encode
from ..errors import FormatError, SchemaError
from .kind import Sampler, VarKind

IMAGE_CODECS = ("jpeg",)


@dataclass(frozen=True)
class Image(VarKind):
    """An encoded image per sample (JPEG), plus its ``(height, width)``, so that crops are
    planned before decoding. ``ds[i]`` decodes it to uint8 ``(3, H, W)``; ``ds[a:b]``,
    ``gather`` and the loaders give :class:`chute.columns.encoded_images.EncodedImages` (decoded in
    batches with ``decode=``, see :mod:`chute.image`).

    Written from PIL images, encoded bytes or uint8 arrays: a JPEG within ``max_side`` is kept
    as it is, anything else is converted to RGB, shrunk so its longer side is ``max_side``
    (None: never) and encoded at ``quality`` (see :func:`chute.image.encode_image`). Stored as
    ``NAME.values.npy`` + ``NAME.offsets.npy`` (the bytes, as :class:`chute.fields.Bytes`) and
    ``NAME.sizes.npy`` (int32, N x 2: height, width).
    """

    max_side: int | None = None
    quality: int = 90
    kind: ClassVar[str] = "image"
    codec: ClassVar[str] = "jpeg"
    dtype: ClassVar[str] = "uint8"  # type: ignore[misc]
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)
    encodes: ClassVar[bool] = True

    def __post_init__(self) -> None:
        m, q = self.max_side, self.quality
        if m is not None and (type(m) is not int or not 1 <= m < 2**31):
            raise SchemaError(f"Image: max_side must be a positive int or None, got {m!r}")
        if type(q) is not int or not 1 <= q <= 100:
            raise SchemaError(f"Image: quality must be an int in 1..100, got {q!r}")

    def files(self, name: str) -> dict[str, str]:
        return {**super().files(name), "sizes": f"{name}.sizes.npy"}

    def role_dtype(self, role: str) -> str:
        return "int32" if role == "sizes" else super().role_dtype(role)

    def expected_shape(self, role: str, n: int, total: int | None = None) -> tuple[int, ...] | None:
        return (n, 2) if role == "sizes" else super().expected_shape(role, n, total)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "codec": self.codec,
            "max_side": self.max_side,
            "quality": self.quality,
        }

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> Image:
        codec = obj.get("codec")
        if codec not in IMAGE_CODECS:
            raise FormatError(
                f"field {name!r}: image codec {codec!r} is not supported by this chute (reads "
                f"{list(IMAGE_CODECS)}); upgrade chute"
            )
        try:
            return cls(obj.get("max_side"), obj.get("quality", 90))
        except SchemaError as exc:
            raise FormatError(f"field {name!r}: {exc}") from None

    def describe(self) -> str:
        return f"image {self.codec}"

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> Any:
        # encodes PIL images, bytes and arrays -> JPEG + sizes
        return prepare_images(values, self.max_side, self.quality, name, start)

    def encode_source(self, value: Any, on_error: str, where: str) -> Any:
        # a JPEG within max_side is kept, anything else re-encoded
        return encode(value, self.max_side, self.quality, on_error, where)

    def sampler(self) -> Sampler:
        def sample(col: Mapping[str, np.ndarray], j: int, at: FieldPart) -> Any:
            values = part_values(col, j, j + 1, at)[1]
            return decode_sample(values, col["sizes"][j], at.dataset, at.name, at.start + j)

        return sample

    def take(self, col: Mapping[str, np.ndarray], a: int, b: int, at: FieldPart) -> Any:
        offsets, values = part_values(col, a, b, at)
        return slice_images(values, offsets - offsets[0], col["sizes"][a:b], at)

    def gather(
        self, name: str, pieces: Sequence[Piece], b: int, out: Mapping[str, Any] | None, pad: Any
    ) -> dict[str, Any]:
        return {name: gather_images(pieces, b)}

    def merge_batches(
        self, name: str, b: int, parts: Sequence[tuple[np.ndarray, Any]], out: Any, pad: Any
    ) -> dict[str, Any]:
        return {name: gather_images(batch_pieces(parts, name), b)}
