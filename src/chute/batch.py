"""Batches as the loaders hand them out: :class:`RaggedBatch` for variable-size fields, and
padding one into a dense tensor (``gather(pad=)``, ``Loader(pad=)``): with one value for every
field, or a value per field (:data:`Pad`)."""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import torch

from . import _compat
from .errors import ArgumentError, SampleIndexError, SchemaError


class RaggedBatch:
    """A batch of a variable-size field: sample ``i`` is ``values[offsets[i]:offsets[i+1]]``.

    ``shapes`` (B, ndim) is set when dimensions other than the first vary; ``values`` is then
    flat and sample ``i`` is reshaped to ``shapes[i]``. A sequence of its samples: ``len(rb)``
    is the batch size, ``rb[i]`` sample ``i`` (a view), ``rb[a:b]`` a list of samples, and
    ``for img in rb`` loops over the samples. The three parts are reachable by name,
    ``rb.values``, ``rb.offsets``, ``rb.shapes`` (``_fields`` lists them, ``_asdict()`` maps
    them). torch's ``pin_memory`` (:meth:`pin_memory`), ``default_convert`` (passed as it is),
    ``default_collate`` (part by part, see :func:`register_batch_type`), pytree ``tree_map`` and
    ``chute.to_device`` (``map_tensors``) all keep it a RaggedBatch.
    """

    __slots__ = ("offsets", "shapes", "values")
    _fields = ("values", "offsets", "shapes")

    def __init__(
        self, values: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor | None = None
    ) -> None:
        self.values = values
        self.offsets = offsets
        self.shapes = shapes
        if type(self) not in _REGISTERED:
            register_batch_type(type(self))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.sample(k) for k in range(*i.indices(len(self)))]
        return self.sample(i)

    def __iter__(self) -> Iterator[torch.Tensor]:
        for k in range(len(self)):
            yield self.sample(k)

    def sample(self, i: Any) -> torch.Tensor:
        """Sample ``i`` of the batch (negative counts from the end), as a view."""
        try:
            k = operator.index(i)
        except TypeError:
            raise ArgumentError(
                f"a RaggedBatch is indexed by an int (a sample) or a slice, not {type(i).__name__}"
            ) from None
        n = len(self)
        if not -n <= k < n:
            raise SampleIndexError(f"sample {k} is out of range for a batch of {n}")
        k %= n
        v = self.values[int(self.offsets[k]) : int(self.offsets[k + 1])]
        return v if self.shapes is None else v.reshape(tuple(self.shapes[k].tolist()))

    def tolist(self) -> list[torch.Tensor]:
        """The samples, as views."""
        return list(self)

    def _asdict(self) -> dict[str, torch.Tensor | None]:
        """The parts by name: ``{"values", "offsets", "shapes"}``."""
        return {"values": self.values, "offsets": self.offsets, "shapes": self.shapes}

    def pin_memory(self) -> RaggedBatch:
        """A copy in page-locked memory (what torch's ``pin_memory`` calls)."""
        return self.map(lambda t: t.pin_memory())

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> RaggedBatch:
        """A RaggedBatch of ``fn`` applied to each part (``shapes`` too, when set)."""
        shapes = None if self.shapes is None else fn(self.shapes)
        return RaggedBatch(fn(self.values), fn(self.offsets), shapes)

    def __reduce__(self) -> tuple[Any, ...]:
        return RaggedBatch, (self.values, self.offsets, self.shapes)

    def __repr__(self) -> str:
        dims = "" if self.shapes is None else f", {self.shapes.shape[1]} dims vary"
        return (
            f"chute.RaggedBatch({len(self)} samples, {len(self.values)} values of "
            f"{str(self.values.dtype).removeprefix('torch.')}{dims})"
        )


_REGISTERED: set[type] = set()  # the classes registered (or tried) with torch
_REGISTERING = threading.Lock()


def register_batch_type(cls: type[RaggedBatch]) -> None:
    """Let torch see ``cls`` (RaggedBatch or a subclass) by its parts (``cls._fields``):
    pytree (``tree_map``, ``torch.compile``) flattens it, ``default_collate`` collates it part
    by part. Done once per class, when its first batch is made (``import chute`` touches no
    torch internals): both are registrations in tables of torch's private modules
    (:mod:`chute._compat`), so a torch without them simply lacks the integration."""
    with _REGISTERING:
        if cls not in _REGISTERED:
            _register(cls)
            _REGISTERED.add(cls)


def _register(cls: type[RaggedBatch]) -> None:
    names = cls._fields
    register = _compat.pytree_register()
    if register is not None:

        def flatten(rb: Any) -> tuple[list[Any], None]:
            return [getattr(rb, n) for n in names], None

        def unflatten(parts: Any, _context: Any) -> Any:
            return cls(*parts)

        register(cls, flatten, unflatten, f"chute.{cls.__name__}")
    torch_collate = _compat.collate()
    if torch_collate is not None:
        collate, fn_map = torch_collate

        def collate_parts(batch: Sequence[Any], *, collate_fn_map: Any = None) -> Any:
            def part(name: str) -> Any:
                got = [getattr(rb, name) for rb in batch]
                return None if got[0] is None else collate(got, collate_fn_map=collate_fn_map)

            return cls(*map(part, names))

        fn_map.setdefault(cls, collate_parts)


Pad: TypeAlias = float | int | Mapping[str, float | int]
"""What ``pad=`` takes: one number for every padded field, or ``{field: number}`` (as Hugging
Face's ``DataCollatorForSeq2Seq`` pads ``labels`` with -100 and the tokens with the pad id);
a field the mapping does not name is padded with 0."""


def pad_value(pad: Pad, field: str) -> float | int:
    """The value ``pad`` fills field ``field`` with: ``pad`` itself, or ``pad[field]`` (0 when
    the mapping does not name the field)."""
    return pad.get(field, 0) if isinstance(pad, Mapping) else pad


def check_pad_fields(pad: Pad | None, fields: Sequence[str]) -> None:
    """A ``pad=`` mapping names only fields in ``fields``, each with a number; else a
    SchemaError naming the field and the fields there are."""
    if not isinstance(pad, Mapping):
        return
    for name, value in pad.items():
        if name not in fields:
            raise SchemaError(
                f"pad= names field {name!r}, which the dataset does not have; its fields are "
                f"{sorted(fields)}"
            )
        if isinstance(value, (np.generic, np.ndarray, torch.Tensor)) and value.ndim == 0:
            value = value.item()
        if not isinstance(value, (bool, int, float, complex)):
            raise SchemaError(f"pad={{{name!r}: {value!r}}}: pad= takes a number per field")


def check_pad(value: Any, dtype: torch.dtype, field: str) -> None:
    """``value`` can fill field ``field`` of ``dtype`` exactly: a number, integral and in range
    for integer dtypes, finite where the dtype overflows. Else a SchemaError, never a cast that
    silently truncates (-1.5 -> -1) or wraps."""
    where = f"pad={value!r} for field {field!r} ({str(dtype).removeprefix('torch.')})"
    if isinstance(value, (np.generic, np.ndarray, torch.Tensor)) and value.ndim == 0:
        value = value.item()
    if not isinstance(value, (bool, int, float, complex)):
        raise SchemaError(f"{where}: pad= takes a number")
    if dtype.is_complex:
        return
    if isinstance(value, complex):
        raise SchemaError(f"{where}: a complex pad does not fit a real dtype")
    if dtype.is_floating_point:
        if math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
            raise SchemaError(f"{where}: out of the dtype's range")
        return
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    low, high = (0, 1) if info is None else (info.min, info.max)
    if (isinstance(value, float) and not value.is_integer()) or not low <= value <= high:
        raise SchemaError(f"{where}: needs an integer in [{low}, {high}]")


def pad_batch(batch: RaggedBatch, pad: Pad, field: str = "?") -> tuple[torch.Tensor, torch.Tensor]:
    """A dense tensor filled with ``pad`` (its value for ``field``, :func:`pad_value`) holding
    every sample at its origin, and the sizes.

    One variable dimension: ``(B, max_len, *inner)`` and the lengths ``(B,)``. Several
    (``shapes`` is set): ``(B, *max_shape)`` and the shapes ``(B, ndim)``. Vectorized: each
    value's coordinates inside its sample are computed at once, then one scatter. ``value``
    must fit the dtype exactly (:func:`check_pad`); ``field`` names it in the error.
    """
    value = pad_value(pad, field)
    check_pad(value, batch.values.dtype, field)
    offsets = batch.offsets
    lengths = offsets[1:] - offsets[:-1]
    b = len(lengths)
    owner = torch.repeat_interleave(torch.arange(b), lengths)
    pos = torch.arange(len(batch.values)) - torch.repeat_interleave(offsets[:-1], lengths)
    if batch.shapes is None:
        width = int(lengths.max()) if b else 0
        out = batch.values.new_full((b, width, *batch.values.shape[1:]), value)
        as_signed(out)[owner, pos] = as_signed(batch.values)
        return out, lengths
    shapes = batch.shapes
    dense = tuple(shapes.max(0).values.tolist()) if b else (0,) * shapes.shape[1]
    out = batch.values.new_full((b, *dense), value)
    index: list[torch.Tensor] = [owner]
    per_value = shapes[owner]  # (total, ndim): the shape of the sample each value belongs to
    for d in range(shapes.shape[1] - 1, -1, -1):  # unravel pos in its sample's own shape
        index.insert(1, pos % per_value[:, d])
        pos = torch.div(pos, per_value[:, d], rounding_mode="floor")
    as_signed(out)[tuple(index)] = as_signed(batch.values)
    return out, shapes


# torch has no indexed writes for its unsigned dtypes beyond uint8 (uint16 token ids): the
# scatter writes the same bits through a view of the signed dtype of that size.
_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def as_signed(t: torch.Tensor) -> torch.Tensor:
    """``t``, or for uint16/32/64 a view of its bits as the signed dtype of that size."""
    signed = _SIGNED.get(t.dtype)
    return t if signed is None else t.view(signed)
