"""Indices -> batch: the vectorized gathers on the hot path.

Measured on a 2-vCPU box (see DESIGN.md): ``np.take(src, idx, axis=0, out=buf, mode="clip")``
beats fancy indexing and, unlike the default ``mode="raise"``, writes straight into ``buf``
instead of into a temporary that is then copied. Indices are bounds-checked once per batch by
the caller, so ``clip`` never clips. Ragged fields turn the batch's offsets into one flat index
and do a single ``take``: no loop over samples.
"""

from __future__ import annotations

import math
import operator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .errors import ArgumentError, FormatError, SampleIndexError, SchemaError


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


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``src[idx]`` along axis 0, written into ``out`` when given. ``idx`` must be in range."""
    return np.take(src, idx, axis=0, out=out, mode="clip")


def var_take(
    values: np.ndarray, offsets: np.ndarray, idx: np.ndarray, path: str
) -> tuple[np.ndarray, np.ndarray]:
    """Gather samples ``idx`` of a values+offsets column: returns (values, batch offsets)."""
    starts = offsets[idx]
    ends = offsets[idx + 1]
    lengths = ends - starts
    if len(idx) and (lengths.min() < 0 or starts.min() < 0 or ends.max() > len(values)):
        bad = idx[(lengths < 0) | (starts < 0) | (ends > len(values))][0]
        raise FormatError(
            f"{path}: offsets of sample {int(bad)} are invalid ({int(offsets[bad])}.."
            f"{int(offsets[bad + 1])} of {len(values)} values); the dataset is corrupt"
        )
    batch_offsets = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(lengths, out=batch_offsets[1:])
    total = int(batch_offsets[-1])
    # flat[k] = starts[i] + (k - batch_offsets[i]) for k in sample i's range
    flat = np.arange(total, dtype=np.int64)
    flat += np.repeat(starts - batch_offsets[:-1], lengths)
    return take_rows(values, flat), batch_offsets


def checked_offsets(col: dict[str, np.ndarray], a: int, b: int, where: Path) -> np.ndarray:
    """Offsets of samples ``a..b`` of a part's column, checked to lie in order inside its
    values: a corrupt offsets file must not turn into a negative or out-of-range slice."""
    offsets = col["offsets"][a : b + 1]
    if offsets[0] < 0 or offsets[-1] > len(col["values"]) or (np.diff(offsets) < 0).any():
        raise FormatError(
            f"{where}: offsets of samples {a}..{b - 1} of this part are invalid "
            f"({offsets[:4].tolist()}... of {len(col['values'])} values); the dataset is corrupt"
        )
    return offsets


def check_shapes(shapes: np.ndarray, offsets: np.ndarray, inner: tuple, where: Path) -> None:
    """Per-sample shapes of a batch with these offsets: no negative dim, the fixed dims,
    exactly the sample's number of values (an int64 overflow is caught by the float check)."""
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        bad = (shapes < 0).any(axis=1) | (shapes.prod(axis=1) != lengths)
    bad |= shapes.astype(np.float64).prod(axis=1) >= 2**62
    for k, d in enumerate(inner, 1):
        if d is not None:
            bad |= shapes[:, k] != d
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FormatError(
            f"{where}: a sample's shape {shapes[i].tolist()} does not fit its {int(lengths[i])} "
            f"values and the inner shape {inner}; the dataset is corrupt"
        )


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
