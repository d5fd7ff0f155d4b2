"""Arrow tables -> chute fields: Parquet files, Arrow IPC / Feather files, and the record
batches behind Hugging Face datasets, JSONL and CSV (``hf``, ``jsonl``, ``csv``).

The schema comes from the Arrow types, never from the first row:

=================================================  =========================================
Arrow type                                         chute field
=================================================  =========================================
bool, int*, uint*, float16/32/64                   ``Tensor((), dtype)``
``fixed_size_list<...<numeric, k2>, k1>``          ``Tensor((k1, k2, ...), dtype)``
``list<numeric>`` / ``large_list``                 ``Ragged(dtype)`` (an empty list is a list)
``list<fixed_size_list<numeric, k>>``              ``Ragged(dtype, (k,))``
string, large_string, dictionary of strings        ``String``
binary, large_binary, fixed_size_binary            ``Bytes``
an HF ``Image()`` feature, ``struct<bytes, path>``  ``Image`` (the encoded bytes stored as is)
an HF ``ClassLabel``                               its integer type; names in the metadata
other structs                                      one field per member, ``name/member``
=================================================  =========================================

An all-null column (Arrow type ``null``) is left out with a warning. Other types (dates,
decimals, maps, lists of strings...) are refused naming the column: leave them out with
``fields=`` or cast them first. ``schema=`` overrides the kinds of some fields (e.g.
``{"jpeg": chute.Image()}`` for a binary column of JPEG files), the rest stay inferred.

**Nulls**: ``nulls="error"`` (default) raises :class:`chute.SourceError` naming the file, the
row (or line) and the column. ``nulls="fill"`` stores 0 for integers and bools, NaN for
floats, ``""``, ``b""`` and empty lists, and counts the nulls per field in the metadata
(``"nulls"``). A null image is always an error.

Memory: a source reads one record batch of about ``batch_bytes`` (32 MiB) at a time (Parquet
by row group and page, IPC files memory-mapped), so a file of any size converts in bounded
memory.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import format as fmt
from ..errors import SourceError, require
from ..sniff import NOUNS
from .base import (
    BATCH_BYTES,
    Batch,
    FieldsArg,
    Source,
    check_name,
    expand_paths,
    field_map,
    read_ahead,
)
from .encoding import check_on_error, encode

NULLS = ("error", "fill")
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
    field: fmt.Field
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
    except (ValueError, AttributeError):
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
            out.append(Column(path, key, fmt.Image()))
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                sub = t.field(i).name
                inner = feature.get(sub) if isinstance(feature, dict) else None
                visit((*path, sub), t.field(i).type, inner)
        elif pa.types.is_null(t):
            warnings.warn(f"{where}: left out {key}: every value is null", stacklevel=4)
        else:  # a type without a field kind is an error only if the column is picked
            try:
                made: fmt.Field | SourceError = arrow_field(pa, t, f"{where}: column {key!r}")
            except SourceError as exc:
                made = exc
            out.append(Column(path, key, made))  # type: ignore[arg-type]

    for f in schema:
        visit((f.name,), f.type, features.get(f.name))
    return out


def arrow_field(pa: Any, t: Any, where: str) -> fmt.Field:
    """The chute field kind for Arrow type ``t`` (see the module docstring)."""
    if pa.types.is_dictionary(t):
        if pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type):
            return fmt.String()
        t = t.value_type
    if _numeric(pa, t):
        return fmt.Tensor((), _dtype(t))
    if pa.types.is_fixed_size_list(t):
        shape, base = _fixed_shape(pa, t)
        if _numeric(pa, base):
            return fmt.Tensor(shape, _dtype(base))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner, base = _fixed_shape(pa, t.value_type)
        if _numeric(pa, base):
            return fmt.Ragged(_dtype(base), inner)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return fmt.String()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return fmt.Bytes()
    raise SourceError(
        f"{where}: Arrow type {t} has no chute field kind (numbers, fixed-size or variable "
        "lists of numbers, strings, binary, structs of these); leave it out with fields= or "
        "cast it first"
    )


class ArrowSource(Source):
    """Record batches with one Arrow schema -> batches of chute fields.

    Subclasses give :meth:`record_batches`, which yields ``(batch, where)``: ``where(i)``
    names row ``i`` of that batch in messages (``"data.parquet: row 1234"``). ``fields`` picks
    / renames columns by their path (``"meta/lang"`` for a struct member); ``schema``
    overrides the kinds of some fields, by their final name; ``workers`` threads turn record
    batches into arrays ahead of the writer (0: in the writing thread). ``features`` are the
    Hugging Face features (default: those in the schema's metadata, as ``datasets`` writes).
    """

    noun = NOUNS["parquet"]

    def __init__(
        self,
        name: str,
        arrow_schema: Any,
        fields: FieldsArg = None,
        *,
        schema: Mapping[str, fmt.Field] | None = None,
        nulls: str = "error",
        batch_bytes: int = BATCH_BYTES,
        workers: int = 1,
        features: Mapping[str, Any] | None = None,
        images: Sequence[str] = (),
        image_root: str | Path | None = None,
        on_error: str = "raise",
        max_side: int | None = None,
        quality: int = 90,
    ):
        if nulls not in NULLS:
            raise SourceError(f'{name}: nulls must be "error" or "fill", got {nulls!r}')
        self.name, self.nulls, self.batch_bytes = name, nulls, batch_bytes
        self.workers, self.on_error = workers, check_on_error(on_error)
        self.image_root = Path(image_root if image_root is not None else ".")
        self._pool: ThreadPoolExecutor | None = None
        self.arrow_schema = arrow_schema
        features = dict(features if features is not None else hf_features(arrow_schema))
        found = {c.key: c for c in columns_of(arrow_schema, name, features)}
        if not found:
            raise SourceError(f"{name}: no columns to convert")
        chosen = field_map(fields, list(found), name) if fields is not None else None
        self.columns = []
        for key, c in found.items():
            if chosen is None or key in chosen:
                new = chosen[key] if chosen is not None else key
                self.columns.append(Column(c.path, check_name(new, key, name), c.field))
        overrides = dict(schema or {})
        unknown = sorted(set(overrides) - {c.name for c in self.columns})
        if unknown:
            raise SourceError(
                f"{name}: schema= names {unknown}, which are not fields; fields are "
                f"{[c.name for c in self.columns]}"
            )
        image = fmt.Image(max_side, quality)
        for c in self.columns:
            if c.name in images:
                if not isinstance(c.field, fmt.String):
                    raise SourceError(f"{name}: images= names {c.name!r}, which holds no paths")
                c.field, c.from_path = image, True
            elif isinstance(c.field, fmt.Image):
                c.field = image
            c.field = overrides.get(c.name, c.field)
            if isinstance(c.field, SourceError):
                raise c.field
        missing = sorted(set(images) - {c.name for c in self.columns})
        if missing:
            raise SourceError(f"{name}: images= names {missing}, which are not fields")
        self.schema = {c.name: c.field for c in self.columns}
        self.skipped: list[dict[str, str]] = []
        self.null_counts: dict[str, int] = {}
        names = _class_names(features, self.columns)
        self.metadata = {"class_names": names} if names else {}
        # filled while converting: the writer's metadata refers to these same objects
        if nulls == "fill":
            self.metadata = {**self.metadata, "nulls": self.null_counts}
        if any(isinstance(f, fmt.Image) for f in self.schema.values()) and on_error == "skip":
            self.metadata = {**self.metadata, "skipped": self.skipped}

    @property
    def top_columns(self) -> list[str]:
        """The top-level Arrow columns the fields need (what readers should read)."""
        return list(dict.fromkeys(c.path[0] for c in self.columns))

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        """Yield ``(pyarrow.RecordBatch, where)`` in row order."""
        raise NotImplementedError

    def batches(self) -> Iterator[Batch]:
        """Converted batches, ``workers`` threads converting ahead of the writer (images
        encoded in a pool of threads of their own)."""
        has_images = any(c.field.kind == "image" for c in self.columns)
        with ThreadPoolExecutor(os.cpu_count() or 1) if has_images else nullcontext() as pool:
            self._pool = pool
            items = self.record_batches()
            for batch in read_ahead(lambda item: self.convert(*item), items, self.workers):
                if len(next(iter(batch.values()))):  # every row of it skipped: nothing to add
                    yield batch

    def convert(self, rb: Any, where: Callable[[int], str]) -> Batch:
        """One record batch as a writer batch: field -> array or list of values."""
        out: Batch = {}
        for c in self.columns:
            arr = rb.column(c.path[0])
            for sub in c.path[1:]:
                arr = _member(arr, sub)
            out[c.name] = self._values(arr, c, where)
        images = [c for c in self.columns if isinstance(c.field, fmt.Image)]
        return self._encode_images(out, images, where, rb.num_rows) if images else out

    def _encode_images(
        self, out: Batch, images: list[Column], where: Callable[[int], str], n: int
    ) -> Batch:
        """Image values encoded (JPEGs kept as they are); rows whose image fails are left out
        and listed with ``on_error="skip"``."""
        failed: dict[int, str] = {}
        for c in images:
            values, f = out[c.name], c.field
            assert isinstance(f, fmt.Image)

            def one(i: int, c: Column = c, values: list = values, f: fmt.Image = f) -> Any:
                place, value = f"{where(i)}: column {c.key!r}", values[i]
                if c.from_path:
                    try:
                        value = self._image_path(value)
                    except SourceError as exc:
                        if self.on_error == "skip":
                            return str(exc)
                        raise SourceError(f"{place}: {exc}") from None
                    place = f"{place} ({value})"
                return encode(value, f.max_side, f.quality, self.on_error, place)

            done = list(self._pool.map(one, range(n))) if self._pool else [one(i) for i in range(n)]
            for i, r in enumerate(done):
                if isinstance(r, str):
                    failed.setdefault(i, r)
            out[c.name] = done
        if not failed:
            return out
        self.skipped.extend({"row": where(i), "reason": r} for i, r in sorted(failed.items()))
        keep = np.array([i not in failed for i in range(n)])
        return {
            k: v[keep]
            if isinstance(v, np.ndarray)
            else [x for x, ok in zip(v, keep, strict=True) if ok]
            for k, v in out.items()
        }

    def _image_path(self, value: str) -> Path:
        """The image file a path column names, relative to ``image_root``; a path that leads
        out of it (``..``, absolute, a symlink) is refused."""
        path = self.image_root / value
        if not path.resolve().is_relative_to(self.image_root.resolve()):
            raise SourceError(
                f"{value!r} leads out of {self.image_root}; pass image_root= a folder holding it"
            )
        return path

    def _values(self, arr: Any, c: Column, where: Callable[[int], str]) -> Any:
        pa = pyarrow()
        f = c.field
        if arr.null_count:
            row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            if self.nulls == "error" or isinstance(f, fmt.Image):
                fix = "" if isinstance(f, fmt.Image) else "pass nulls='fill' to store an empty "
                fix = fix and fix + "value, or "
                raise SourceError(
                    f"{where(row)}: column {c.key!r} is null (or missing); {fix}leave the "
                    "column out with fields=, or fill it first"
                )
            self.null_counts[c.name] = self.null_counts.get(c.name, 0) + arr.null_count
        t = arr.type
        if pa.types.is_dictionary(t):
            arr, t = arr.dictionary_decode(), t.value_type
        if isinstance(f, fmt.Image):
            return _image_bytes(pa, arr, c, where)
        if isinstance(f, (fmt.String, fmt.Bytes)) and not _numeric(pa, t):
            empty = "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b""
            if pa.types.is_fixed_size_binary(t):
                arr, empty = arr.cast(pa.binary()), b""
            if arr.null_count:
                arr = arr.fill_null(empty)
            try:
                values = arr.to_pylist()
            except UnicodeDecodeError:  # Parquet strings are not validated: find the row
                values = arr.cast(pa.large_binary()).to_pylist()
            if isinstance(f, fmt.String) and values and isinstance(values[0], bytes):
                return _utf8(values, c, where)
            return values
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return _ragged(pa, arr, c, where)
        return _dense(pa, arr, c, where)


def _member(arr: Any, name: str) -> Any:
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
        data = _member(arr, "bytes")
        if data.null_count:
            row = int(np.flatnonzero(_nulls(data))[0])
            raise SourceError(
                f"{where(row)}: column {c.key!r} holds a file path, not the image's bytes; "
                "chute reads no paths from a table (embed the images: datasets' "
                "save_to_disk / push_to_hub do)"
            )
        arr = data
    return arr.to_pylist()


def _class_names(features: Mapping[str, Any], columns: Iterable[Column]) -> dict[str, list]:
    """``{field: class names}`` for the top-level columns that are HF ``ClassLabel``s."""
    out = {}
    for c in columns:
        feature = features.get(c.path[0]) if len(c.path) == 1 else None
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
            names = feature.get("names")
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                out[c.name] = names
    return out


def same_schema(first: Any, other: Any, where: str, first_where: str) -> None:
    """Refuse a file whose columns differ (names, types) from the first file's."""
    a = [(f.name, f.type) for f in first]
    b = [(f.name, f.type) for f in other]
    if a != b:
        diff = next(
            (f"{x[0]}: {x[1]} vs {y[0]}: {y[1]}" for x, y in zip(a, b, strict=False) if x != y),
            f"{len(a)} columns vs {len(b)}",
        )
        raise SourceError(
            f"{where}: its columns differ from {first_where}'s ({diff}); convert files of one "
            "schema together"
        )


def rows_per_batch(row_bytes: float, batch_bytes: int) -> int:
    """Rows in a batch of about ``batch_bytes``, at least 1."""
    return max(1, int(batch_bytes // max(row_bytes, 1.0)))


def slices(rb: Any, batch_bytes: int) -> Iterator[tuple[Any, int]]:
    """``(slice, first row)`` of a record batch, each about ``batch_bytes`` (zero-copy)."""
    n = rb.num_rows
    step = rows_per_batch(rb.nbytes / max(n, 1), batch_bytes)
    for start in range(0, n, step):
        yield rb.slice(start, step), start


class ParquetSource(ArrowSource):
    """Parquet files (a file, a folder of ``.parquet`` files, or a list), read by row group in
    batches of about ``batch_bytes``; every file must have the first file's columns."""

    noun = NOUNS["parquet"]

    def __init__(
        self, src: str | Path | Sequence[str | Path], fields: FieldsArg = None, **options: Any
    ):
        pq = require("pyarrow.parquet", "arrow")
        from ..sniff import PARQUET_SUFFIXES

        self.files = expand_paths(src, PARQUET_SUFFIXES)
        self._pq = pq
        metas = []
        for f in self.files:
            try:
                metas.append(pq.ParquetFile(f))
            except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
                raise SourceError(f"{f}: cannot be read as Parquet ({exc})") from None
        first = metas[0].schema_arrow
        for f, m in zip(self.files[1:], metas[1:], strict=True):
            same_schema(first, m.schema_arrow, str(f), str(self.files[0]))
        name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        options.setdefault("image_root", self.files[0].parent)
        super().__init__(name, first, fields, **options)
        self.num_samples = sum(m.metadata.num_rows for m in metas)
        self._row_bytes = [_parquet_row_bytes(m.metadata) for m in metas]
        for m in metas:
            m.close()

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        for path, row_bytes in zip(self.files, self._row_bytes, strict=True):
            rows = rows_per_batch(row_bytes, self.batch_bytes)
            start = 0
            with self._pq.ParquetFile(path) as pf:
                try:
                    for rb in pf.iter_batches(rows, columns=self.top_columns, use_threads=False):
                        yield rb, rows_from(path, start)
                        start += rb.num_rows
                except (OSError, ValueError) as exc:
                    raise SourceError(
                        f"{path}: rows from {start}: cannot be read ({exc})"
                    ) from None


def _parquet_row_bytes(meta: Any) -> float:
    """Uncompressed bytes per row, from the row groups' statistics."""
    total = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return total / max(meta.num_rows, 1)


def rows_from(path: Path | str, start: int) -> Callable[[int], str]:
    """``where`` for rows counted from ``start``: ``where(i)`` is ``"PATH: row start+i"``."""
    return lambda i: f"{path}: row {start + i}"


class ArrowFileSource(ArrowSource):
    """Arrow IPC files (Feather v2, ``.arrow``; file or stream format, as ``datasets`` writes
    them), memory-mapped, one slice of about ``batch_bytes`` at a time."""

    noun = NOUNS["arrow"]

    def __init__(
        self, src: str | Path | Sequence[str | Path], fields: FieldsArg = None, **options: Any
    ):
        from ..sniff import ARROW_SUFFIXES

        self.files = expand_paths(src, ARROW_SUFFIXES)
        schemas = [self._open(f)[1] for f in self.files]
        for f, s in zip(self.files[1:], schemas[1:], strict=True):
            same_schema(schemas[0], s, str(f), str(self.files[0]))
        name = str(src) if isinstance(src, (str, Path)) else str(self.files[0])
        options.setdefault("image_root", self.files[0].parent)
        super().__init__(name, schemas[0], fields, **options)
        self.num_samples = sum(self._count(f) for f in self.files)

    def _open(self, path: Path) -> tuple[Iterator[Any], Any]:
        """(record batches, schema) of an IPC file or stream, memory-mapped."""
        pa = pyarrow()
        try:
            source = pa.memory_map(str(path))
            try:
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                return batches, reader.schema
            except pa.ArrowInvalid:
                source.seek(0)
                stream = pa.ipc.open_stream(source)
                return iter(stream), stream.schema
        except (OSError, ValueError) as exc:
            raise SourceError(f"{path}: cannot be read as Arrow IPC / Feather ({exc})") from None

    def _count(self, path: Path) -> int:
        batches, _ = self._open(path)
        return sum(b.num_rows for b in self._checked(path, batches))

    def _checked(self, path: Path, batches: Iterator[Any]) -> Iterator[Any]:
        """The record batches, each validated in full: a memory-mapped file is trusted for
        nothing (offsets out of bounds, bad UTF-8 are errors here, never a crash later)."""
        try:
            for rb in batches:
                rb.validate(full=True)
                yield rb
        except (OSError, ValueError) as exc:
            raise SourceError(f"{path}: a record batch cannot be read ({exc})") from None

    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        for path in self.files:
            batches, _ = self._open(path)
            start = 0
            for rb in self._checked(path, batches):
                for piece, offset in slices(rb.select(self.top_columns), self.batch_bytes):
                    yield piece, rows_from(path, start + offset)
                start += rb.num_rows
