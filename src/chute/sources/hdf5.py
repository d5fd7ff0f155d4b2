"""HDF5 files (h5py): every dataset of the common length becomes a field.

The source is a path or an open ``h5py.File`` / ``Group`` / ``Dataset``, read the same way
(an object stays open: its owner closes it). Nested groups give field names like
``group/name``. Numeric datasets become :class:`chute.fields.Tensor` fields, 1-D string datasets
:class:`chute.String`, 1-D variable-length numeric datasets :class:`chute.Ragged`. Rows are
read in whole HDF5 chunks (see :func:`~chute.sources.base.plan_ranges`), so each chunk is
decompressed once. Soft and external links are not followed: each is left out with a warning
that names it (a soft link's target is converted under its own name).

Attributes travel too: the dataset's metadata gets ``{"hdf5_attrs": {"/": {root attributes},
"/group/name": {...}, ...}}``, for every group and dataset that has attributes whose values
are JSON (numbers, bools, strings, arrays of them; up to 64 KiB of JSON each). Others
(references, compound, complex, NaN, empty) are left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from .. import kinds
from ..errors import SourceError, require
from ..sniff import NOUNS
from .base import ArraySource, FieldsArg, array_field, json_attrs, shape_of

ATTRS = "hdf5_attrs"  # the metadata entry holding the attributes


class HDF5Source(ArraySource):
    """An HDF5 file (a path, or an open h5py object); ``fields`` picks / renames datasets by
    their path in the file (relative to the group given)."""

    noun = NOUNS["hdf5"]

    def __init__(self, src: Any, fields: FieldsArg = None, **options: Any):
        self._h5py = h5py = require("h5py", "hdf5")
        self._file = None  # the file this source opened, and closes
        if isinstance(src, (h5py.Group, h5py.Dataset)):
            node, name = src, _object_name(src)
        else:
            try:
                self._file = node = h5py.File(src, "r")
            except OSError as exc:
                raise SourceError(f"{src}: cannot be opened as an HDF5 file ({exc})") from None
            name = str(src)
        self.name = name
        try:
            arrays, attrs, self.links = _contents(h5py, node)
            for key, what in self.links.items():
                warnings.warn(f"{name}: left out {key}: {what}", stacklevel=2)
            kept = {k: v for k, v in attrs.items() if v}
            self.metadata = {ATTRS: kept} if kept else {}
            if not arrays:
                raise SourceError(f"{name}: no datasets in this HDF5 file")
            super().__init__(name, arrays, fields, **options)
        except BaseException:
            self.close()
            raise

    def field(self, key: str, array: Any) -> kinds.Field:
        h5py, where = self._h5py, f"{self.name}: dataset {key!r}"
        ndim = len(shape_of(array) or ())
        if h5py.check_string_dtype(array.dtype) is not None:
            if ndim != 1:
                raise SourceError(f"{where}: a {ndim}-D string dataset cannot be a field")
            return kinds.String()
        base = h5py.check_vlen_dtype(array.dtype)
        if base is not None and ndim == 1:
            return kinds.Ragged(array_field(base, (0,), self.name, key).dtype)
        if array.dtype.kind == "O":
            raise SourceError(
                f"{where}: dtype {array.dtype} (references or nested variable-length "
                "data) cannot be a field"
            )
        return super().field(key, array)

    def reader(self, array: Any, field: kinds.Field) -> Callable[[int, int], Any]:
        if field.kind == "ragged":
            return lambda a, b: list(array[a:b])
        return super().reader(array, field)  # strings: UTF-8 bytes decoded there

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _object_name(node: Any) -> str:
    """``file.h5`` for a file, ``file.h5:/group`` for a group or dataset inside it."""
    return node.file.filename if node.name == "/" else f"{node.file.filename}:{node.name}"


def _contents(h5py: Any, node: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(datasets by path, JSON attributes by path, links left out -> why) under ``node``.

    ``visititems`` visits each object once through its hard links and never reports soft or
    external links: those are found by listing the links of every group visited.
    """
    if isinstance(node, h5py.Dataset):
        return {node.name.rsplit("/", 1)[-1] or "data": node}, {"/": json_attrs(node.attrs)}, {}
    arrays: dict[str, Any] = {}
    attrs = {"/": json_attrs(node.attrs)}
    links: dict[str, str] = {}
    groups = [("", node)]

    def visit(name: str, obj: Any) -> None:
        attrs["/" + name] = json_attrs(obj.attrs)
        if isinstance(obj, h5py.Dataset):
            arrays[name] = obj
        else:
            groups.append((name + "/", obj))

    node.visititems(visit)
    for prefix, group in groups:
        for name in group:
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                try:
                    group[name]
                    links[prefix + name] = (
                        f"a soft link to {link.path} (links are not followed; the target "
                        "is converted under its own name)"
                    )
                except KeyError:
                    links[prefix + name] = f"a soft link to {link.path}, which does not exist"
            elif isinstance(link, h5py.ExternalLink):
                links[prefix + name] = (
                    f"an external link to {link.filename}:{link.path} (links are not "
                    "followed; convert that file on its own)"
                )
    return arrays, attrs, links


def is_hdf5_object(obj: Any) -> bool:
    """True for an open h5py File, Group or Dataset, without importing h5py."""
    node = hasattr(obj, "attrs") and hasattr(obj, "file")
    return type(obj).__module__.split(".", 1)[0] == "h5py" and node
