"""The ``tensor`` kind: a fixed shape and dtype per sample, one ``(N, *shape)`` file."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from .._torch import as_numpy, to_torch
from ..columns.gather import FieldPart, Piece, gather_fixed, out_rows
from ..columns.values import prepare_fixed
from ..errors import FormatError, SchemaError
from ..format.spec import check_shape, dtype_name, json_dtype, json_list, storage_dtype
from .kind import FieldKind, Sampler


@dataclass(frozen=True)
class Tensor(FieldKind):
    """A fixed-shape field: every sample is an array of ``shape`` and ``dtype``.

    Stored as ``NAME.npy`` of shape ``(N, *shape)``; a batch is one ``take`` from the map.
    """

    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    kind: ClassVar[str] = "tensor"
    fixed: ClassVar[bool] = True
    cuts: ClassVar[bool] = True
    numeric: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", check_shape(self.shape, allow_none=False))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    def files(self, name: str) -> dict[str, str]:
        return {"data": f"{name}.npy"}

    def expected_shape(self, role: str, n: int, total: int | None = None) -> tuple[int, ...] | None:
        return (n, *self.shape)

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        return self.shape

    def row_nbytes(self) -> int:
        return math.prod(self.shape) * storage_dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> Tensor:
        dtype = json_dtype(name, obj)
        try:
            return cls(tuple(json_list(obj, "shape")), dtype)
        except SchemaError as exc:
            raise FormatError(f"field {name!r}: {exc}") from None

    def describe(self) -> str:
        return f"tensor {self.dtype} {self.shape}"

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> np.ndarray:
        return prepare_fixed(values, self, name, start, auto)

    def sampler(self) -> Sampler:
        dtype = self.dtype
        if dtype == "bfloat16":  # stored as its 16 bits: to_torch views them

            def sample(col: Mapping[str, np.ndarray], j: int, at: FieldPart) -> Any:
                return to_torch(col["data"][j, ...], dtype)

            return sample
        from_numpy, copy = torch.from_numpy, np.array

        def sample_copy(col: Mapping[str, np.ndarray], j: int, at: FieldPart) -> Any:
            return from_numpy(copy(col["data"][j, ...]))  # a fresh copy out of the map

        return sample_copy

    def take(self, col: Mapping[str, np.ndarray], a: int, b: int, at: FieldPart) -> Any:
        return to_torch(col["data"][a:b], self.dtype)

    def gather(
        self, name: str, pieces: Sequence[Piece], b: int, out: Mapping[str, Any] | None, pad: Any
    ) -> dict[str, Any]:
        if out is None or name not in out:
            return {name: to_torch(gather_fixed(pieces, self, b), self.dtype)}
        t = out[name]
        gather_fixed(pieces, self, b, out_rows(t, name, self, b))
        return {name: t if len(t) == b else t[:b]}

    def merge_batches(
        self, name: str, b: int, parts: Sequence[tuple[np.ndarray, Any]], out: Any, pad: Any
    ) -> dict[str, Any]:
        t = out[name] if out is not None and name in out else None
        rows = np.empty((b, *self.shape), storage_dtype(self.dtype)) if t is None else None
        if t is not None:
            rows = out_rows(t, name, self, b)
        for where, got in parts:
            rows[where] = as_numpy(got) if isinstance(got, torch.Tensor) else got  # type: ignore[index]
        if t is None:
            return {name: to_torch(rows, self.dtype)}  # type: ignore[arg-type]
        return {name: t if len(t) == b else t[:b]}
