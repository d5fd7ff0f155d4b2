"""Zarr stores, format v2 and v3, as a folder or a zip file, or an open zarr Group / Array.

A group's arrays (nested groups as ``group/name``) of the common length become fields; a
store holding one array gives one field named after the store (``images.zarr`` ->
``images``) or the array. Rows are read in whole shards (v3 sharding) or chunks. Attributes
travel as with HDF5: the dataset's metadata gets ``{"zarr_attrs": {"/": {group attributes},
"/group/name": {...}}}`` (JSON values up to 64 KiB each).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SourceError, require
from ..sniff import NOUNS
from .base import ArraySource, FieldsArg, json_attrs

ATTRS = "zarr_attrs"  # the metadata entry holding the attributes


class ZarrSource(ArraySource):
    """A Zarr store (a path, or an open zarr Group / Array); ``fields`` picks / renames arrays
    by their path in the store."""

    noun = NOUNS["zarr"]

    def __init__(self, src: Any, fields: FieldsArg = None, **options: Any):
        self._store = None  # a zip store this source opened, and closes
        if is_zarr_object(src):
            node, name = src, _object_name(src)
            single = getattr(node, "basename", "") or "array"
        else:
            zarr = require("zarr", "zarr")
            path = Path(src)
            name, single = str(path), path.name.split(".")[0]
            if path.is_file():
                self._store = zarr.storage.ZipStore(path, mode="r")
            try:
                node = zarr.open(self._store or str(path), mode="r")
            except (OSError, ValueError, KeyError) as exc:
                self.close()
                raise SourceError(f"{path}: cannot be opened as a Zarr store ({exc})") from None
        try:
            attrs = {"/": json_attrs(node.attrs)}
            if hasattr(node, "shape"):  # a store holding one array
                arrays = {single: node}
            else:
                arrays = dict(_walk(node, "", attrs))
                if not arrays:
                    raise SourceError(f"{name}: no arrays in this Zarr group")
            kept = {k: v for k, v in attrs.items() if v}
            self.metadata = {ATTRS: kept} if kept else {}
            super().__init__(name, arrays, fields, **options)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _walk(group: Any, prefix: str, attrs: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for name, arr in group.arrays():
        attrs[f"/{prefix}{name}"] = json_attrs(arr.attrs)
        yield prefix + name, arr
    for name, sub in group.groups():
        attrs[f"/{prefix}{name}"] = json_attrs(sub.attrs)
        yield from _walk(sub, f"{prefix}{name}/", attrs)


def _object_name(node: Any) -> str:
    """Where an open node lives, e.g. ``file:///data/x.zarr/group`` (zarr 3's store path)."""
    return str(getattr(node, "store_path", None) or getattr(node, "store", "<zarr>"))


def is_zarr_object(obj: Any) -> bool:
    """True for an open zarr Group or Array (not a store), without importing zarr."""
    node = hasattr(obj, "attrs") and (hasattr(obj, "shape") or hasattr(obj, "arrays"))
    return type(obj).__module__.split(".", 1)[0] == "zarr" and node
