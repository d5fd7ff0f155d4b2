"""The ``bytes`` and ``string`` kinds: a run of bytes per sample (a ``str`` is its UTF-8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..columns.gather import FieldPart, Piece, gather_var, part_values, sample_values, strings
from ..columns.values import bytes_row, prepare_var, string_row
from .kind import Sampler, VarKind


@dataclass(frozen=True)
class Bytes(VarKind):
    """Raw bytes per sample (e.g. an encoded JPEG). Read back as a 1-D uint8 tensor."""

    kind: ClassVar[str] = "bytes"
    pads: ClassVar[bool] = True
    cuts: ClassVar[bool] = True
    dtype: ClassVar[str] = "uint8"  # type: ignore[misc]
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> Any:
        return prepare_var(values, self, name, start, bytes_row(name))


@dataclass(frozen=True)
class String(VarKind):
    """A ``str`` per sample, stored UTF-8 encoded. Read back as ``str`` (``list[str]`` per
    batch)."""

    kind: ClassVar[str] = "string"
    cuts: ClassVar[bool] = True
    dtype: ClassVar[str] = "uint8"  # type: ignore[misc]
    inner_shape: tuple[int | None, ...] = field(default=(), init=False)

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> Any:
        return prepare_var(values, self, name, start, string_row(name))

    def sampler(self) -> Sampler:
        def sample(col: Mapping[str, np.ndarray], j: int, at: FieldPart) -> str:
            values = sample_values(col, j, at)
            try:
                return values.tobytes().decode("utf-8")
            except UnicodeDecodeError:  # strings() raises the error, naming the sample
                where = f"{at.dataset}: field {at.name!r}, sample {at.start + j}"
                return strings(values, np.array([0, len(values)]), where)[0]

        return sample

    def take(self, col: Mapping[str, np.ndarray], a: int, b: int, at: FieldPart) -> list[str]:
        offsets, values = part_values(col, a, b, at)
        where = f"{at.dataset}: field {at.name!r}, samples {at.start + a}..{at.start + b - 1}"
        return strings(values, offsets - offsets[0], where)

    def gather(
        self, name: str, pieces: Sequence[Piece], b: int, out: Mapping[str, Any] | None, pad: Any
    ) -> dict[str, Any]:
        rb = gather_var(pieces, self.dtype, self.inner_shape, b)
        dataset = getattr(pieces[0].files, "dataset", None) if pieces else None
        where = f"{dataset}: field {name!r}" if dataset is not None else f"field {name!r}"
        return {name: strings(rb.values.numpy(), rb.offsets.numpy(), where)}

    def merge_batches(
        self, name: str, b: int, parts: Sequence[tuple[np.ndarray, Any]], out: Any, pad: Any
    ) -> dict[str, Any]:
        texts: list[Any] = [None] * b
        for where, got in parts:
            for w, text in zip(where.tolist(), got, strict=True):
                texts[w] = text
        return {name: texts}
