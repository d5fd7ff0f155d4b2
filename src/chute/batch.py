"""Batches as the loaders hand them out: :class:`RaggedBatch` for variable-size fields, and
padding one into a dense tensor (``gather(pad=)``, ``Loader(pad=)``)."""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np
import torch

from .errors import ArgumentError, SampleIndexError, SchemaError


class RaggedBatch(NamedTuple):
    """A batch of a variable-size field: sample ``i`` is ``values[offsets[i]:offsets[i+1]]``.

    ``shapes`` (B, ndim) is set when dimensions other than the first vary; ``values`` is then
    flat and sample ``i`` is reshaped to ``shapes[i]``. ``len(rb)`` is the batch size and
    ``rb[i]`` is sample ``i`` (``rb[a:b]`` a list of samples). Still a NamedTuple of its three
    members: ``values, offsets, shapes = rb``, ``rb.values`` and iteration give them, so
    ``pin_memory``, ``default_collate`` and ``to_device`` move it like any tuple of tensors.
    """

    values: torch.Tensor
    offsets: torch.Tensor
    shapes: torch.Tensor | None = None

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:  # type: ignore[override]
        # Only the user's ``rb[i]`` comes here: unpacking, iteration and the member
        # attributes read the tuple's slots directly.
        if isinstance(i, slice):
            return [self.sample(k) for k in range(*i.indices(len(self)))]
        return self.sample(i)

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
        return [self.sample(i) for i in range(len(self))]


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


def pad_batch(
    batch: RaggedBatch, value: float | int, field: str = "?"
) -> tuple[torch.Tensor, torch.Tensor]:
    """A dense tensor filled with ``value`` holding every sample at its origin, and the sizes.

    One variable dimension: ``(B, max_len, *inner)`` and the lengths ``(B,)``. Several
    (``shapes`` is set): ``(B, *max_shape)`` and the shapes ``(B, ndim)``. Vectorized: each
    value's coordinates inside its sample are computed at once, then one scatter. ``value``
    must fit the dtype exactly (:func:`check_pad`); ``field`` names it in the error.
    """
    check_pad(value, batch.values.dtype, field)
    offsets = batch.offsets
    lengths = offsets[1:] - offsets[:-1]
    b = len(lengths)
    owner = torch.repeat_interleave(torch.arange(b), lengths)
    pos = torch.arange(len(batch.values)) - torch.repeat_interleave(offsets[:-1], lengths)
    if batch.shapes is None:
        width = int(lengths.max()) if b else 0
        out = batch.values.new_full((b, width, *batch.values.shape[1:]), value)
        out[owner, pos] = batch.values
        return out, lengths
    shapes = batch.shapes
    dense = tuple(shapes.max(0).values.tolist()) if b else (0,) * shapes.shape[1]
    out = batch.values.new_full((b, *dense), value)
    index: list[torch.Tensor] = [owner]
    per_value = shapes[owner]  # (total, ndim): the shape of the sample each value belongs to
    for d in range(shapes.shape[1] - 1, -1, -1):  # unravel pos in its sample's own shape
        index.insert(1, pos % per_value[:, d])
        pos = torch.div(pos, per_value[:, d], rounding_mode="floor")
    out[tuple(index)] = batch.values
    return out, shapes
