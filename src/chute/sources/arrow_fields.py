"""Arrow types -> chute field kinds, and Arrow columns -> the values the writer takes.

The mapping (see :mod:`chute.sources.arrow` for the table) is decided from the Arrow schema
alone, plus the Hugging Face features ``datasets`` records in it (``Image``, ``ClassLabel``).
Values are converted a column at a time: numbers and fixed-size lists as one array, variable
lists as views of one flat array, strings and binary as Python objects.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import format as fmt
from .. import kinds
from ..errors import SourceError, require

HF_METADATA = b"huggingface"  # the schema metadata key where datasets keeps its features


def pyarrow() -> Any:
    """``pyarrow``, or :class:`chute.MissingDependencyError` naming the extra."""
    return require("pyarrow", "arrow")


@dataclass
class Column:
    """How one Arrow column (``path``: names from the top-level column down into structs)
    becomes the chute field ``name`` (``field`` is the error to raise if a column of a type
    without a field kind is picked)."""

    path: tuple[str, ...]
    name: str
    field: kinds.Field
    from_path: bool = False  # an Image field read from the file paths the column holds

    @property
    def key(self) -> str:
        return "/".join(self.path)


def hf_features(schema: Any) -> dict[str, Any]:
    """The Hugging Face ``features`` recorded in an Arrow schema's metadata ({} if none)."""
    raw = (schema.metadata or {}).get(HF_METADATA)
    if not raw:
        return {}
    try:
        info = json.loads(raw)
        features = info.get("info", {}).get("features", {})
    except (ValueError, AttributeError, RecursionError):  # not the features datasets writes
        return {}
    return features if isinstance(features, dict) else {}


def _numeric(pa: Any, t: Any) -> bool:
    return bool(pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t))


def _dtype(t: Any) -> str:
    return fmt.dtype_name(np.dtype(t.to_pandas_dtype()))


def _fixed_shape(pa: Any, t: Any) -> tuple[tuple[int, ...], Any]:
    """(shape, base type) of nested fixed-size lists."""
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    return tuple(shape), t


def _is_image_struct(pa: Any, t: Any) -> bool:
    return bool(pa.types.is_struct(t)) and {t.field(i).name for i in range(t.num_fields)} == {
        "bytes",
        "path",
    }


def columns_of(schema: Any, where: str, features: Mapping[str, Any]) -> list[Column]:
    """Every chute field an Arrow ``schema`` holds (structs flattened), named by their path;
    ``features`` are Hugging Face features by column (Image, ClassLabel)."""
    pa = pyarrow()
    out: list[Column] = []

    def visit(path: tuple[str, ...], t: Any, feature: Any) -> None:
        key = "/".join(path)
        kind = feature.get("_type") if isinstance(feature, dict) else None
        if kind == "Image" or _is_image_struct(pa, t):
            if not (_is_image_struct(pa, t) or pa.types.is_binary(t)):
                raise SourceError(f"{where}: column {key!r}: an Image feature stored as {t}")
            out.append(Column(path, key, kinds.Image()))
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                sub = t.field(i).name
                inner = feature.get(sub) if isinstance(feature, dict) else None
                visit((*path, sub), t.field(i).type, inner)
        elif pa.types.is_null(t):
            warnings.warn(f"{where}: left out {key}: every value is null", stacklevel=4)
        else:  # a type without a field kind is an error only if the column is picked
            try:
                made: kinds.Field | SourceError = arrow_field(pa, t, f"{where}: column {key!r}")
            except SourceError as exc:
                made = exc
            out.append(Column(path, key, made))  # type: ignore[arg-type]

    for f in schema:
        visit((f.name,), f.type, features.get(f.name))
    return out


def arrow_field(pa: Any, t: Any, where: str) -> kinds.Field:
    """The chute field kind for Arrow type ``t`` (see the module docstring)."""
    if pa.types.is_dictionary(t):
        if pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type):
            return kinds.String()
        t = t.value_type
    if _numeric(pa, t):
        return kinds.Tensor((), _dtype(t))
    if pa.types.is_fixed_size_list(t):
        shape, base = _fixed_shape(pa, t)
        if _numeric(pa, base):
            return kinds.Tensor(shape, _dtype(base))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner, base = _fixed_shape(pa, t.value_type)
        if _numeric(pa, base):
            return kinds.Ragged(_dtype(base), inner)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return kinds.String()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return kinds.Bytes()
    raise SourceError(
        f"{where}: Arrow type {t} has no chute field kind (numbers, fixed-size or variable "
        "lists of numbers, strings, binary, structs of these); leave it out with fields= or "
        "cast it first"
    )


def class_names(features: Mapping[str, Any], columns: Iterable[Column]) -> dict[str, list]:
    """``{field: class names}`` for the top-level columns that are HF ``ClassLabel``s."""
    out = {}
    for c in columns:
        feature = features.get(c.path[0]) if len(c.path) == 1 else None
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
            names = feature.get("names")
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                out[c.name] = names
    return out


def column_values(arr: Any, c: Column, where: Callable[[int], str]) -> Any:
    """An Arrow column (nulls already handled) as a writer batch value for ``c.field``: an
    array ``(n, *shape)``, a list of arrays (Ragged), of ``str`` / ``bytes`` (images: their
    encoded bytes); ``where(i)`` names row ``i`` in errors."""
    pa = pyarrow()
    f = c.field
    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.dictionary_decode(), t.value_type
    if f.encodes:
        return _image_bytes(pa, arr, c, where)
    if f in (kinds.String(), kinds.Bytes()) and not _numeric(pa, t):
        empty = "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b""
        if pa.types.is_fixed_size_binary(t):
            arr, empty = arr.cast(pa.binary()), b""
        if arr.null_count:
            arr = arr.fill_null(empty)
        try:
            values = arr.to_pylist()
        except UnicodeDecodeError:  # Parquet strings are not validated: find the row
            values = arr.cast(pa.large_binary()).to_pylist()
        if f == kinds.String() and values and isinstance(values[0], bytes):
            return _utf8(values, c, where)
        return values
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _ragged(pa, arr, c, where)
    return _dense(pa, arr, c, where)


def member(arr: Any, name: str) -> Any:
    """A struct member, null where the struct is (``flatten`` merges the parent's nulls)."""
    t = arr.type
    index = next(i for i in range(t.num_fields) if t.field(i).name == name)
    return arr.flatten()[index]


def _fill(pa: Any, t: Any) -> Any:
    return float("nan") if pa.types.is_floating(t) else (False if pa.types.is_boolean(t) else 0)


def _dense(pa: Any, arr: Any, c: Column, where: Callable[[int], str]) -> np.ndarray:
    """Numbers or nested fixed-size lists as one array ``(n, *shape)``; nulls filled."""
    n = len(arr)
    shape, _ = _fixed_shape(pa, arr.type)
    valid = None if not arr.null_count else ~arr.is_null().to_numpy(zero_copy_only=False)
    flat = arr
    for k in shape:  # the children of a sliced list start at offset * k
        flat = flat.values.slice(flat.offset * k, len(flat) * k)
    if flat.null_count:  # nulls inside a row are refused; a null row's children are filled
        bad = _nulls(flat).reshape(n, -1).any(axis=1)
        if valid is not None:
            bad &= valid
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise SourceError(f"{where(row)}: column {c.key!r} holds a null inside a value")
        flat = flat.fill_null(_fill(pa, flat.type))
    out = flat.to_numpy(zero_copy_only=False).reshape(n, *shape)
    if valid is not None:
        out = out.copy()
        out[~valid] = _fill(pa, flat.type)
    return out


def _nulls(arr: Any) -> np.ndarray:
    return arr.is_null().to_numpy(zero_copy_only=False)


def _ragged(pa: Any, arr: Any, c: Column, where: Callable[[int], str]) -> list[np.ndarray]:
    """A list column as one array per row (views of one flat array); a null row is empty."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    inner, _ = _fixed_shape(pa, arr.type.value_type)
    flat = arr.flatten()  # the sliced rows' values, null rows' values left out
    for k in inner:
        flat = flat.values.slice(flat.offset * k, len(flat) * k)
    if flat.null_count:
        item = int(np.flatnonzero(_nulls(flat))[0]) // int(np.prod(inner, dtype=np.int64))
        row = int(np.searchsorted(np.cumsum(lengths), item, side="right"))
        raise SourceError(f"{where(row)}: column {c.key!r} holds a null inside a list")
    values = flat.to_numpy(zero_copy_only=False).reshape(-1, *inner)
    return np.split(values, np.cumsum(lengths)[:-1])


def _utf8(values: list[bytes], c: Column, where: Callable[[int], str]) -> list[str]:
    out = []
    for i, v in enumerate(values):
        try:
            out.append(v.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise SourceError(f"{where(i)}: column {c.key!r} is not valid UTF-8 ({exc})") from None
    return out


def _image_bytes(pa: Any, arr: Any, c: Column, where: Callable[[int], str]) -> list[bytes]:
    """The encoded bytes of an image column (binary, or HF's ``struct<bytes, path>``)."""
    if pa.types.is_struct(arr.type):
        data = member(arr, "bytes")
        if data.null_count:
            row = int(np.flatnonzero(_nulls(data))[0])
            raise SourceError(
                f"{where(row)}: column {c.key!r} holds a file path, not the image's bytes; "
                "chute reads no paths from a table (embed the images: datasets' "
                "save_to_disk / push_to_hub do)"
            )
        arr = data
    return arr.to_pylist()


def integral_beyond_int64(arr: Any) -> np.ndarray:
    """The rows of an Arrow column (numbers, lists or structs of them) holding a float that is
    a whole number beyond int64: where a text source's integer may have been read as a float
    (pyarrow infers ``double`` for an integer too big for ``int64``)."""
    pa = pyarrow()
    t = arr.type
    if pa.types.is_floating(t):
        v = np.abs(arr.to_numpy(zero_copy_only=False).astype(np.float64))
        return np.flatnonzero((v >= 2.0**63) & np.isfinite(v) & (v == np.floor(v)))
    if pa.types.is_struct(t):
        found = [integral_beyond_int64(member(arr, t.field(i).name)) for i in range(t.num_fields)]
        return np.unique(np.concatenate([np.empty(0, np.int64), *found]))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        import pyarrow.compute as pc

        inner = integral_beyond_int64(arr.flatten())
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.unique(parents[inner])
    return np.empty(0, np.int64)


def too_big(key: str, value: int, t: Any) -> str:
    """Why integer ``value`` of ``key`` (beyond int64, read as ``t``) is refused, and the fix."""
    fits = "'uint64'" if 0 <= value < 1 << 64 else "'float64'"
    return (
        f"{key!r} holds the integer {value}, beyond int64: read as {t} it would be rounded; "
        f"give its type with types={{{key!r}: {fits}}} (a float64 rounds it), or leave it "
        "out with fields="
    )
