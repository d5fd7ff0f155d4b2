"""The contract every field kind keeps (:class:`FieldKind`), and the behaviour the kinds stored
as values + offsets share (:class:`VarKind`).

A kind is a frozen dataclass that says, for its own samples: which files hold them and with
which dtypes (``files``, ``role_dtype``, ``expected_shape``), its manifest entry (``to_json`` /
``from_json``, dispatched by :mod:`chute.kinds.registry`), how the writer checks and converts a
batch (``prepare``), how the reader reads one sample, a slice and a gather (``sampler``,
``take``, ``gather``), how a mix merges sub-batches (``merge_batches``), and one line
describing it (``describe``). The format-level methods do no I/O; the reading and writing ones
are built from the array code of :mod:`chute.columns`, the layer below the kinds.
:func:`chute.testing.check_field_kind` runs a kind through all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from .._torch import to_torch
from ..batch import RaggedBatch, pad_batch
from ..columns.gather import (
    FieldPart,
    Piece,
    batch_pieces,
    check_shapes,
    gather_var,
    part_values,
    sample_values,
)
from ..format import storage_dtype

Sampler = Callable[[Mapping[str, np.ndarray], int, FieldPart], Any]
"""Reads sample ``j`` of a part's arrays of a field: ``sample(col, j, at)``."""


class FieldKind:
    """What a field kind provides; the kinds are the closed set :data:`chute.kinds.Field`."""

    kind: ClassVar[str]  # the manifest's "kind"
    fixed: ClassVar[bool] = False  # one (N, *shape) file: out= buffers, one take per batch
    pads: ClassVar[bool] = False  # gather(pad=) pads it and adds FIELD_lengths
    variable_dims: ClassVar[bool] = False  # a per-sample shapes file is stored (Ragged only)
    numeric: ClassVar[bool] = False  # samples are the user's numbers (tensor, ragged): tokens
    encodes: ClassVar[bool] = False  # a source's values are encoded on the way in (images)
    cuts: ClassVar[bool] = False  # a gathered batch's rows a:b are a[a:b] (tensor, RaggedBatch
    # by its offsets, list): a loader may gather several batches at once and cut them apart
    dtype: str

    # ---------------------------------------------------------------- the format (no I/O)

    def files(self, name: str) -> dict[str, str]:
        """Role -> file name (relative to its part folder) for field ``name``."""
        raise NotImplementedError

    def role_dtype(self, role: str) -> str:
        """The dtype name of file ``role``: the field's own for ``data`` and ``values``, int64
        for ``offsets`` and ``shapes``."""
        return self.dtype if role in ("data", "values") else "int64"

    def expected_shape(self, role: str, n: int, total: int | None = None) -> tuple[int, ...] | None:
        """Shape of file ``role`` in a part of ``n`` samples; for ``values`` the leading
        dimension ``total`` comes from the offsets (None: unknown yet, so None)."""
        raise NotImplementedError

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        """The shape of one sample, None where it varies."""
        raise NotImplementedError

    def row_nbytes(self) -> int:
        """Bytes of one sample of a fixed field (of one row of a variable field's values)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The field's manifest entry."""
        return {"kind": self.kind}

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> FieldKind:
        """The field of manifest entry ``obj`` (its ``kind`` already matched); else a
        FormatError naming field ``name``."""
        return cls()

    def describe(self) -> str:
        """One line for people: ``chute info`` and schema errors."""
        return self.kind

    # ---------------------------------------------------------------- writing

    def prepare(self, values: Any, name: str, start: int, auto: bool) -> Any:
        """A batch of user ``values`` (samples ``start``...) checked and converted to what the
        field's files take: an array, or a :class:`chute.columns.var_batch.VarBatch`. ``auto``:
        the schema was inferred, so a sample that does not fit raises ``Promote``."""
        raise NotImplementedError

    def encode_source(self, value: Any, on_error: str, where: str) -> Any:
        """A source's ``value`` (bytes, or a file) as the writer takes it, for kinds that
        ``encodes``; else the reason it failed (``on_error="skip"``) or a SourceError naming
        ``where``. Other kinds take values as they are."""
        return value

    # ---------------------------------------------------------------- reading

    def sampler(self) -> Sampler:
        """The function reading one sample (``ds[i]``), made once per open dataset."""
        raise NotImplementedError

    def take(self, col: Mapping[str, np.ndarray], a: int, b: int, at: FieldPart) -> Any:
        """Samples ``a..b-1`` of one part (``ds[a:b]``), as fresh values."""
        raise NotImplementedError

    def gather(
        self, name: str, pieces: Sequence[Piece], b: int, out: Mapping[str, Any] | None, pad: Any
    ) -> dict[str, Any]:
        """The ``b`` samples ``pieces`` locate as batch entries (``name``, and with ``pad``
        for a padded kind ``name + "_lengths"``); fixed kinds fill ``out[name]`` if given."""
        raise NotImplementedError

    def merge_batches(
        self, name: str, b: int, parts: Sequence[tuple[np.ndarray, Any]], out: Any, pad: Any
    ) -> dict[str, Any]:
        """One batch of ``b`` samples from sub-batches ``(positions, value)`` (a mix's
        sources), each value put at its positions; ``out`` and ``pad`` as for :meth:`gather`."""
        raise NotImplementedError


class VarKind(FieldKind):
    """A kind stored as ``NAME.values.npy`` + ``NAME.offsets.npy`` (int64, N+1); read back as
    a :class:`chute.RaggedBatch` per batch unless the kind says otherwise."""

    inner_shape: tuple[int | None, ...]

    def files(self, name: str) -> dict[str, str]:
        files = {"values": f"{name}.values.npy", "offsets": f"{name}.offsets.npy"}
        if self.variable_dims:
            files["shapes"] = f"{name}.shapes.npy"
        return files

    def expected_shape(self, role: str, n: int, total: int | None = None) -> tuple[int, ...] | None:
        if role == "offsets":
            return (n + 1,)
        if role == "shapes":
            return (n, 1 + len(self.inner_shape))
        if total is None:
            return None
        return (total,) if self.variable_dims else (total, *self.inner_shape)  # type: ignore[arg-type]

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        return (None, *self.inner_shape)

    def row_nbytes(self) -> int:
        inner = () if self.variable_dims else tuple(d or 1 for d in self.inner_shape)
        return math.prod(inner) * storage_dtype(self.dtype).itemsize

    def sampler(self) -> Sampler:
        dtype, inner = self.dtype, self.inner_shape

        def sample(col: Mapping[str, np.ndarray], j: int, at: FieldPart) -> Any:
            values = sample_values(col, j, at)
            if "shapes" in col:
                shape = col["shapes"][j : j + 1]
                check_shapes(shape, np.array([len(values)]), inner, at)
                values = values.reshape(shape[0])
            return to_torch(values, dtype)

        return sample

    def take(self, col: Mapping[str, np.ndarray], a: int, b: int, at: FieldPart) -> Any:
        offsets, values = part_values(col, a, b, at)
        offsets = offsets - offsets[0]
        shapes = None
        if "shapes" in col:
            rows = col["shapes"][a:b]
            check_shapes(rows, np.diff(offsets), self.inner_shape, at)
            shapes = to_torch(rows, "int64")
        return RaggedBatch(to_torch(values, self.dtype), torch.from_numpy(offsets), shapes)

    def gather(
        self, name: str, pieces: Sequence[Piece], b: int, out: Mapping[str, Any] | None, pad: Any
    ) -> dict[str, Any]:
        return self._padded(name, gather_var(pieces, self.dtype, self.inner_shape, b), pad)

    def merge_batches(
        self, name: str, b: int, parts: Sequence[tuple[np.ndarray, Any]], out: Any, pad: Any
    ) -> dict[str, Any]:
        pieces = batch_pieces(parts, name)
        return self._padded(name, gather_var(pieces, self.dtype, self.inner_shape, b), pad)

    def _padded(self, name: str, rb: Any, pad: Any) -> dict[str, Any]:
        if pad is None or not self.pads:
            return {name: rb}
        padded, lengths = pad_batch(rb, pad, name)
        return {name: padded, f"{name}_lengths": lengths}
