"""The registry of field kinds: the closed set a dataset's fields are made of (it is the file
format), and the one place that dispatches on it (a manifest entry's ``kind``, a user's schema
value). Every other module asks the field itself (:class:`chute.kinds.kind.FieldKind`).

Adding a kind: a module with its class (see ``docs/field_kinds.md``), its name in
:data:`Field`, and a test calling :func:`chute.testing.check_field_kind`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union, get_args

import torch

from .._torch import TORCH_DTYPES
from ..errors import FormatError
from .blob import Bytes, String
from .image import Image
from .mask import Mask
from .ragged import Ragged
from .tensor import Tensor

Field = Union[Tensor, Ragged, Bytes, String, Image, Mask]  # noqa: UP007 - a runtime alias, py3.10 safe
"""Any field kind: the one line that lists them (a new kind is added here)."""
KINDS: dict[str, type[Field]] = {k.kind: k for k in get_args(Field)}
"""The manifest's ``kind`` -> its class."""


def is_field(value: Any) -> bool:
    """Whether ``value`` is a chute field kind (an instance of one of :data:`KINDS`)."""
    return isinstance(value, tuple(KINDS.values()))


def image_field(value: Any) -> Image | None:
    """``value`` when it is an :class:`Image` field (whose encoding options a source
    follows), else None."""
    return value if isinstance(value, Image) else None


def fixed_fields(schema: Mapping[str, Field]) -> dict[str, Tensor]:
    """The fixed-shape fields of ``schema`` (those ``out=`` buffers are made for)."""
    return {k: f for k, f in schema.items() if isinstance(f, Tensor)}


def field_from_json(name: str, obj: Any) -> Field:
    """The field of manifest entry ``obj``; else a FormatError naming field ``name``."""
    if not isinstance(obj, dict):
        raise FormatError(f"field {name!r}: expected an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FormatError(f"field {name!r}: unknown kind {kind!r}")
    return cls.from_json(name, obj)  # type: ignore[return-value]


def field_to_json(f: Field) -> dict[str, Any]:
    """The manifest entry of field ``f``."""
    return f.to_json()


def merge_fields(a: Field, b: Field) -> Field | None:
    """The one field holding the samples of fields ``a`` and ``b`` (written apart, e.g. by
    several write tasks): ``a`` when equal; a :class:`Ragged` when both are tensors or ragged
    of one dtype and number of dimensions whose sizes differ; else None."""
    if a == b:
        return a
    dims = []
    for f in (a, b):
        if isinstance(f, Tensor) and f.shape:
            dims.append(f.sample_shape[1:])
        elif isinstance(f, Ragged):
            dims.append(f.inner_shape)
        else:
            return None
    if a.dtype != b.dtype or len(dims[0]) != len(dims[1]):
        return None
    return Ragged(a.dtype, tuple(x if x == y else None for x, y in zip(*dims, strict=True)))


def empty_buffers(
    schema: Mapping[str, Field], batch_size: int, pin_memory: bool = False
) -> dict[str, torch.Tensor]:
    """Uninitialised ``(batch_size, *shape)`` tensors, one per fixed-shape field of ``schema``:
    ``out=`` buffers for a gather (``empty_batch()`` of a Dataset or a mix)."""
    return {
        name: torch.empty(
            (batch_size, *f.shape), dtype=TORCH_DTYPES[f.dtype], pin_memory=pin_memory
        )
        for name, f in fixed_fields(schema).items()
    }
