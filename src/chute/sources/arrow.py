"""Arrow record batches -> chute batches: :class:`ArrowSource`, the base of the table sources
(``parquet``, ``ipc``, ``hf``, ``jsonl``, ``csv``), which only say how to read their record
batches. The types are mapped, and columns converted, in ``arrow_fields``.

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
``{"jpeg": chute.fields.Image()}`` for a binary column of JPEG files), the rest stay inferred.

**Nulls**: ``nulls="error"`` (default) raises :class:`chute.SourceError` naming the file, the
row (or line) and the column. ``nulls="fill"`` stores 0 for integers and bools, NaN for
floats, ``""``, ``b""`` and empty lists, and counts the nulls per field in the metadata
(``"nulls"``). A null image is always an error.

Memory: a source reads one record batch of about ``batch_bytes`` (32 MiB) at a time (Parquet
by row group and page, IPC files memory-mapped), so a file of any size converts in bounded
memory.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from .. import kinds
from ..columns.source_images import check_on_error
from ..errors import ArgumentError, SourceError
from .arrow_fields import (
    Column,
    class_names,
    column_values,
    columns_of,
    hf_features,
    member,
)
from .base import (
    BATCH_BYTES,
    Batch,
    FieldsArg,
    Source,
    check_name,
    field_map,
    one_field_each,
    read_ahead,
)

NULLS = ("error", "fill")


class ArrowSource(Source):
    """Record batches with one Arrow schema -> batches of chute fields.

    Subclasses give :meth:`record_batches`, which yields ``(batch, where)``: ``where(i)``
    names row ``i`` of that batch in messages (``"data.parquet: row 1234"``). ``fields`` picks
    / renames columns by their path (``"meta/lang"`` for a struct member); ``schema``
    overrides the kinds of some fields, by their final name; ``workers`` threads turn record
    batches into arrays ahead of the writer (0: in the writing thread). ``features`` are the
    Hugging Face features (default: those in the schema's metadata, as ``datasets`` writes).
    """

    noun = "an Arrow table"

    def __init__(
        self,
        name: str,
        arrow_schema: Any,
        fields: FieldsArg = None,
        *,
        schema: Mapping[str, kinds.Field] | None = None,
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
            raise ArgumentError(f'nulls must be "error" or "fill", got {nulls!r}')
        self.name, self.nulls, self.batch_bytes = name, nulls, batch_bytes
        self.workers, self.on_error = workers, check_on_error(on_error)
        self.image_root = Path(image_root if image_root is not None else ".")
        self._pool: ThreadPoolExecutor | None = None
        self.arrow_schema = arrow_schema
        features = dict(features if features is not None else hf_features(arrow_schema))
        found = columns_of(arrow_schema, name, features)
        if not found:
            raise SourceError(f"{name}: no columns to convert")
        keys = list(dict.fromkeys(c.key for c in found))
        chosen = field_map(fields, keys, name) if fields is not None else None
        self.columns = []
        for c in found:
            if chosen is None or c.key in chosen:
                new = chosen[c.key] if chosen is not None else c.key
                self.columns.append(Column(c.path, check_name(new, c.key, name), c.field))
        one_field_each(
            ((_described(c.path), c.name) for c in self.columns),
            name,
            "fields= names both alike: rename one in the file, or leave both out with fields=",
        )
        overrides = dict(schema or {})
        unknown = sorted(set(overrides) - {c.name for c in self.columns})
        if unknown:
            raise SourceError(
                f"{name}: schema= names {unknown}, which are not fields; fields are "
                f"{[c.name for c in self.columns]}"
            )
        image = kinds.Image(max_side, quality)
        for c in self.columns:
            if c.name in images:
                if c.field != kinds.String():
                    raise SourceError(f"{name}: images= names {c.name!r}, which holds no paths")
                c.field, c.from_path = image, True
            elif kinds.image_field(c.field):  # (a column's field may be a deferred SourceError)
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
        names = class_names(features, self.columns)
        self.metadata = {"class_names": names} if names else {}
        # filled while converting: the writer's metadata refers to these same objects
        if nulls == "fill":
            self.metadata = {**self.metadata, "nulls": self.null_counts}
        if any(f.encodes for f in self.schema.values()) and on_error == "skip":
            self.metadata = {**self.metadata, "skipped": self.skipped}

    @property
    def top_columns(self) -> list[str]:
        """The top-level Arrow columns the fields need (what readers should read)."""
        return list(dict.fromkeys(c.path[0] for c in self.columns))

    @abstractmethod
    def record_batches(self) -> Iterator[tuple[Any, Callable[[int], str]]]:
        """Yield ``(pyarrow.RecordBatch, where)`` in row order."""

    def batches(self) -> Iterator[Batch]:
        """Converted batches, ``workers`` threads converting ahead of the writer (images
        encoded in a pool of threads of their own)."""
        has_images = any(c.field.encodes for c in self.columns)
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
                arr = member(arr, sub)
            out[c.name] = self._values(arr, c, where)
        images = [c for c in self.columns if c.field.encodes]
        return self._encode_images(out, images, where, rb.num_rows) if images else out

    def _encode_images(
        self, out: Batch, images: list[Column], where: Callable[[int], str], n: int
    ) -> Batch:
        """Image values encoded (JPEGs kept as they are); rows whose image fails are left out
        and listed with ``on_error="skip"``."""
        failed: dict[int, str] = {}
        for c in images:
            values, f = out[c.name], c.field

            def one(i: int, c: Column = c, values: list = values, f: kinds.Field = f) -> Any:
                place, value = f"{where(i)}: column {c.key!r}", values[i]
                if c.from_path:
                    try:
                        value = self._image_path(value)
                    except SourceError as exc:
                        if self.on_error == "skip":
                            return str(exc)
                        raise SourceError(f"{place}: {exc}") from None
                    place = f"{place} ({value})"
                return f.encode_source(value, self.on_error, place)

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
        f = c.field
        if arr.null_count:
            row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            if self.nulls == "error" or f.encodes:
                fix = "" if f.encodes else "pass nulls='fill' to store an empty "
                fix = fix and fix + "value, or "
                raise SourceError(
                    f"{where(row)}: column {c.key!r} is null (or missing); {fix}leave the "
                    "column out with fields=, or fill it first"
                )
            self.null_counts[c.name] = self.null_counts.get(c.name, 0) + arr.null_count
        return column_values(arr, c, where)


def _described(path: tuple[str, ...]) -> str:
    """A column, or a struct's member, as messages name it."""
    if len(path) == 1:
        return f"column {path[0]!r}"
    return f"member {path[-1]!r} of struct {'/'.join(path[:-1])!r}"


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


def rows_from(path: Path | str, start: int) -> Callable[[int], str]:
    """``where`` for rows counted from ``start``: ``where(i)`` is ``"PATH: row start+i"``."""
    return lambda i: f"{path}: row {start + i}"
