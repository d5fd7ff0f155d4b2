"""HDF5 files (h5py): every dataset of the common length becomes a field.

Nested groups give field names like ``group/name``. Numeric datasets become
:class:`chute.Tensor` fields, 1-D string datasets :class:`chute.String`, 1-D variable-length
numeric datasets :class:`chute.Ragged`. Rows are read in whole HDF5 chunks (see
:func:`~chute.sources.base.plan_ranges`), so each chunk is decompressed once.

Attributes travel too: the dataset's metadata gets ``{"hdf5_attrs": {"/": {root attributes},
"/group/name": {...}, ...}}``, for every group and dataset that has attributes whose values
are JSON (numbers, bools, strings, arrays of them; up to 64 KiB of JSON each). Others
(references, compound, complex, NaN, empty) are left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import format as fmt
from ..errors import SourceError, require
from .base import ArraySource, FieldsArg, array_field

SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
MAGIC = b"\x89HDF\r\n\x1a\n"
ATTRS = "hdf5_attrs"  # the metadata entry holding the attributes
MAX_ATTR_JSON = 64 << 10  # bigger attributes (embedded files, lookup tables) stay behind


class HDF5Source(ArraySource):
    """An HDF5 file; ``fields`` picks / renames datasets by their path in the file."""

    noun = "an HDF5 file"

    def __init__(self, path: str | Path, fields: FieldsArg = None, **options: Any):
        self._h5py = h5py = require("h5py", "hdf5")
        try:
            self._file = h5py.File(path, "r")
        except OSError as exc:
            raise SourceError(f"{path}: cannot be opened as an HDF5 file ({exc})") from None
        arrays: dict[str, Any] = {}
        attrs = {"/": _json_attrs(self._file.attrs)}

        def visit(name: str, obj: Any) -> None:
            attrs["/" + name] = _json_attrs(obj.attrs)
            if isinstance(obj, h5py.Dataset):
                arrays[name] = obj

        self._file.visititems(visit)
        kept = {k: v for k, v in attrs.items() if v}
        self.metadata = {ATTRS: kept} if kept else {}
        if not arrays:
            self._file.close()
            raise SourceError(f"{path}: no datasets in this HDF5 file")
        try:
            super().__init__(str(path), arrays, fields, **options)
        except BaseException:
            self._file.close()
            raise

    def field(self, key: str, array: Any) -> fmt.Field:
        h5py, where = self._h5py, f"{self.name}: dataset {key!r}"
        if h5py.check_string_dtype(array.dtype) is not None:
            if array.ndim != 1:
                raise SourceError(f"{where}: a {array.ndim}-D string dataset cannot be a field")
            return fmt.String()
        base = h5py.check_vlen_dtype(array.dtype)
        if base is not None and array.ndim == 1:
            return fmt.Ragged(array_field(base, (0,), self.name, key).dtype)
        if array.dtype.kind == "O":
            raise SourceError(
                f"{where}: dtype {array.dtype} (references or nested variable-length "
                "data) cannot be a field"
            )
        return super().field(key, array)

    def reader(self, array: Any, field: fmt.Field) -> Callable[[int, int], Any]:
        if isinstance(field, fmt.String):
            strings = array.asstr()
            return lambda a, b: strings[a:b].tolist()
        if isinstance(field, fmt.Ragged):
            return lambda a, b: list(array[a:b])
        return super().reader(array, field)

    def close(self) -> None:
        self._file.close()


def _json_attrs(attrs: Any) -> dict[str, Any]:
    """The attributes whose values are JSON once numpy types are made plain; others dropped."""
    out = {}
    for name in attrs:
        try:
            value = _plain(attrs[name])
            size = len(json.dumps(value, allow_nan=False))
        except (OSError, TypeError, ValueError):  # unreadable, not JSON, not UTF-8, NaN
            continue
        if size <= MAX_ATTR_JSON:
            out[name] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def is_hdf5(path: Path) -> bool:
    """True for a file with the HDF5 signature (at offset 0; user blocks are not probed)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC
