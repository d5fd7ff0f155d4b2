"""Zarr stores, format v2 and v3, as a folder or a zip file, or an open zarr Group / Array.

A group's arrays (nested groups as ``group/name``) of the common length become fields; a
store holding one array gives one field named after the store (``images.zarr`` ->
``images``) or the array. Rows are read in whole shards (v3 sharding) or chunks. Attributes
travel as with HDF5: the dataset's metadata gets ``{"zarr_attrs": {"/": {group attributes},
"/group/name": {...}}}`` (JSON values up to 64 KiB each).

Nothing is unpickled: before zarr opens a store, its metadata files are read as plain JSON and
a store whose arrays use the ``pickle`` codec, or hold Python objects other than strings and
bytes (``vlen-utf8`` / ``vlen-bytes``), is refused with a :class:`~chute.errors.SourceError`;
zarr 2 would unpickle such chunks while reading them. An open zarr Array or Group is checked
the same way from its arrays' metadata.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SourceError, require
from ..sniff import NOUNS
from .base import ArraySource, FieldsArg, json_attrs

ATTRS = "zarr_attrs"  # the metadata entry holding the attributes
METADATA_FILES = frozenset({".zarray", ".zgroup", ".zmetadata", "zarr.json"})  # not .zattrs
MAX_METADATA = 64 << 20  # a metadata file bigger than this is not a Zarr store's
UNSAFE_CODECS = frozenset({"pickle"})  # decoding runs code from the file
SAFE_OBJECT_CODECS = frozenset({"vlen-utf8", "vlen-bytes"})  # objects that are only str / bytes


class ZarrSource(ArraySource):
    """A Zarr store (a path, or an open zarr Group / Array); ``fields`` picks / renames arrays
    by their path in the store."""

    noun = NOUNS["zarr"]

    def __init__(self, src: Any, fields: FieldsArg = None, **options: Any):
        self._store = None  # a zip store this source opened, and closes
        if is_zarr_object(src):
            node, name = src, _object_name(src)
            single = getattr(node, "basename", "") or "array"
            found = [(single, node)] if hasattr(node, "shape") else _walk(node, "", {})
            for key, arr in found:
                check_codecs(_array_metadata(arr), f"{name}: array {key!r}")
        else:
            zarr = require("zarr", "zarr")
            path = Path(src)
            name, single = str(path), path.name.split(".")[0]
            for where, meta in _metadata_files(path):
                check_codecs(meta, f"{path}: {where}")
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


def _metadata_files(path: Path) -> Iterator[tuple[str, Any]]:
    """Each metadata file of a store (a folder or a zip) as (its name, its JSON), read without
    zarr; symlinks are not followed, files over ``MAX_METADATA`` are refused."""
    if path.is_file():
        try:
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if info.filename.rsplit("/", 1)[-1] in METADATA_FILES:
                        if info.file_size > MAX_METADATA:
                            raise SourceError(f"{path}: {info.filename} is over 64 MiB")
                        yield info.filename, _json(zf.read(info), path, info.filename)
        except (OSError, zipfile.BadZipFile) as exc:
            raise SourceError(f"{path}: cannot be read as a zipped Zarr store ({exc})") from None
        return
    for folder, _dirs, files in os.walk(path):
        for fname in sorted(METADATA_FILES.intersection(files)):
            file = Path(folder, fname)
            where = str(file.relative_to(path))
            if file.is_symlink() or file.stat().st_size > MAX_METADATA:
                raise SourceError(f"{path}: {where} is a symlink or over 64 MiB")
            yield where, _json(file.read_bytes(), path, where)


def _json(raw: bytes, path: Path, where: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"{path}: cannot be opened as a Zarr store ({where}: {exc})") from None


def _array_metadata(arr: Any) -> Any:
    """An open array's metadata as JSON-like values (zarr 3: ``metadata.to_dict()``; zarr 2:
    its dtype, filters and compressor)."""
    meta: Any = getattr(arr, "metadata", None)
    if hasattr(meta, "to_dict"):
        return meta.to_dict()
    codecs = [*(arr.filters or ()), *([arr.compressor] if arr.compressor else [])]
    return {"dtype": arr.dtype.str, "filters": [c.get_config() for c in codecs]}


def check_codecs(meta: Any, where: str) -> None:
    """Refuse metadata naming a codec that unpickles, or object values other than str/bytes.

    Walks every dict in ``meta`` (an array's metadata, a group's, or consolidated metadata
    holding many; user attributes are skipped): a codec is a dict with ``id`` (v2) or ``name``
    (v3); an object array is a dict whose ``dtype`` is ``|O`` and whose filters hold no
    ``vlen-utf8`` / ``vlen-bytes``.
    """
    if isinstance(meta, list):
        for item in meta:
            check_codecs(item, where)
    if not isinstance(meta, dict):
        return
    codec = meta.get("id", meta.get("name"))
    if isinstance(codec, str) and codec in UNSAFE_CODECS:
        raise SourceError(
            f"{where}: uses the {codec!r} codec, which runs code from the file when read; "
            "chute does not convert it: rewrite the array with a numeric or string dtype"
        )
    for key, value in meta.items():
        if key != "attributes" and not key.endswith(".zattrs"):  # user JSON, not metadata
            check_codecs(value, where)
    dtype = meta.get("dtype")
    if isinstance(dtype, str) and dtype.lstrip("|") in ("O", "object"):
        ids = {str(f.get("id")) for f in meta.get("filters") or () if isinstance(f, dict)}
        if not ids & SAFE_OBJECT_CODECS:
            raise SourceError(
                f"{where}: holds Python objects (dtype {dtype!r}, filters {sorted(ids)}): "
                "chute converts only numeric, string and bytes arrays"
            )


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
