"""The ``ragged`` kind: a variable first dimension (and maybe others) per sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..columns.values import prepare_var, ragged_row
from ..errors import FormatError, SchemaError
from ..format.spec import check_shape, dtype_name, json_dtype, json_list
from .kind import VarKind


@dataclass(frozen=True)
class Ragged(VarKind):
    """A variable-size field, e.g. token ids or images of different sizes.

    ``inner_shape`` gives the sample shape after the first (variable) axis; ``None`` marks
    further variable dimensions, e.g. ``Ragged("uint8", (None, 3))`` for HxWx3 images.
    Stored as ``NAME.values.npy`` + ``NAME.offsets.npy`` (int64, N+1), plus
    ``NAME.shapes.npy`` (int64, N x ndim) when a dimension other than the first varies.
    """

    dtype: str = "float32"
    inner_shape: tuple[int | None, ...] = ()
    kind: ClassVar[str] = "ragged"
    pads: ClassVar[bool] = True
    numeric: ClassVar[bool] = True
    cuts: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "inner_shape", check_shape(self.inner_shape, allow_none=True))

    @property
    def variable_dims(self) -> bool:  # type: ignore[override]
        """True when some dimension besides the first varies (a shapes file is stored)."""
        return None in self.inner_shape

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "dtype": self.dtype, "inner_shape": list(self.inner_shape)}

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> Ragged:
        dtype = json_dtype(name, obj)
        try:
            return cls(dtype, tuple(json_list(obj, "inner_shape")))
        except SchemaError as exc:
            raise FormatError(f"field {name!r}: {exc}") from None

    def describe(self) -> str:
        inner = ", ".join("?" if d is None else str(d) for d in self.inner_shape)
        return f"ragged {self.dtype} (?{', ' if inner else ''}{inner})"

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> Any:
        return prepare_var(values, self, name, start, ragged_row(self, name, auto))
