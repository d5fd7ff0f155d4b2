"""Zarr stores, format v2 and v3, as a folder or a zip file.

A group's arrays (nested groups as ``group/name``) of the common length become fields; a
store holding one array gives one field named after the store (``images.zarr`` ->
``images``). Rows are read in whole shards (v3 sharding) or chunks.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SourceError, require
from .base import ArraySource, FieldsArg

SUFFIXES = (".zarr", ".zr2", ".zr3")
METADATA = ("zarr.json", ".zgroup", ".zarray")  # v3, v2 group, v2 array


class ZarrSource(ArraySource):
    """A Zarr store; ``fields`` picks / renames arrays by their path in the store."""

    noun = "a Zarr store"

    def __init__(self, path: str | Path, fields: FieldsArg = None, **options: Any):
        zarr = require("zarr", "zarr")
        path = Path(path)
        self._store = None
        if path.is_file():
            self._store = zarr.storage.ZipStore(path, mode="r")
        try:
            node = zarr.open(self._store or str(path), mode="r")
        except (OSError, ValueError, KeyError) as exc:
            self.close()
            raise SourceError(f"{path}: cannot be opened as a Zarr store ({exc})") from None
        if hasattr(node, "shape"):  # a store holding one array
            arrays = {path.name.split(".")[0]: node}
        else:
            arrays = dict(_walk(node, ""))
            if not arrays:
                self.close()
                raise SourceError(f"{path}: no arrays in this Zarr group")
        try:
            super().__init__(str(path), arrays, fields, **options)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _walk(group: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    for name, arr in group.arrays():
        yield prefix + name, arr
    for name, sub in group.groups():
        yield from _walk(sub, f"{prefix}{name}/")


def is_zarr(path: Path) -> bool:
    """True for a folder or zip file with Zarr metadata at its root."""
    if path.is_dir():
        return any((path / m).is_file() for m in METADATA)
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    return any(m in names for m in METADATA)
