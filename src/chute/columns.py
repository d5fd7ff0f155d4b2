"""The writer's side of one field: user values -> checked arrays -> appended .npy files.

``ColumnWriter`` owns the files of one field in one part folder. Values are checked and
converted for a whole batch first (``prepare``), then appended (``write``), so a bad sample
never leaves the field's files out of step with the others.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import xxhash

from . import format as fmt
from .atomic import libc
from .errors import SchemaError
from .npyio import header_bytes

_COPY_CHUNK = 64 << 20
WRITEBACK_BYTES = 32 << 20  # a file starts writing its pages to disk every this many bytes


_SYNC_FILE_RANGE_WRITE = 2  # start writeback of dirty pages, do not wait for it


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing ``nbytes`` at ``offset`` of ``fd`` to disk, now.

    Without it the pages of a conversion wait in the page cache until the commit's ``fsync``,
    which then writes them all while nothing else happens. Started early, the disk writes while
    the source is read, and at most ~``WRITEBACK_BYTES`` per file are left for the ``fsync``.
    Best effort: a no-op where the call is missing, and errors surface at that ``fsync``.
    """
    fn = libc("sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    if fn is not None:
        fn(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def to_array(value: Any, name: str, index: int) -> tuple[np.ndarray, str, bool]:
    """Convert a user value to ``(array, dtype name, came from native Python)``."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().resolve_conj().resolve_neg()
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view("<u2"), "bfloat16", False
        arr, native = t.numpy(), False
    elif isinstance(value, np.ndarray):
        arr, native = value, False
    elif isinstance(value, (str, bytes, bytearray, memoryview)):
        raise SchemaError(
            f"field {name!r}, sample {index}: got {type(value).__name__}, expected an array"
        )
    else:
        native = not isinstance(value, np.generic) and not hasattr(value, "__array_interface__")
        try:
            arr = np.asarray(value)
        except ValueError as exc:  # e.g. a list of lists of different lengths
            raise SchemaError(
                f"field {name!r}, sample {index}: cannot make an array ({exc})"
            ) from None
    if arr.dtype.kind in "OUSVMm" or arr.dtype.name not in fmt.TORCH_DTYPES:
        raise SchemaError(
            f"field {name!r}, sample {index}: dtype {arr.dtype} cannot be stored (object, str, "
            "structured, datetime and long double arrays are refused); use String()/Bytes() "
            "for text and encoded data, or convert to a numeric dtype"
        )
    return arr, arr.dtype.name, native


def _var_bytes(value: Any, f: fmt.Field, name: str, index: int) -> np.ndarray:
    if isinstance(f, fmt.String):
        if not isinstance(value, str):
            raise SchemaError(
                f"field {name!r}, sample {index}: expected str, got {type(value).__name__}"
            )
        try:
            return np.frombuffer(value.encode("utf-8"), np.uint8)
        except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from a bad decode
            raise SchemaError(
                f"field {name!r}, sample {index}: the str has no UTF-8 form ({exc.reason} at "
                f"character {exc.start}: {value[exc.start : exc.end]!r}); clean it first"
            ) from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(value), np.uint8)
    arr, dt, _ = to_array(value, name, index)
    if dt != "uint8" or arr.ndim != 1:
        raise SchemaError(f"field {name!r}, sample {index}: Bytes takes bytes or a 1-D uint8 array")
    return arr


def infer_field(name: str, value: Any, batch: bool = False) -> fmt.Field:
    """The field kind of one sample (or, with ``batch``, of an array of samples)."""
    if isinstance(value, str):
        return fmt.String()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return fmt.Bytes()
    arr, dt, _ = to_array(value, name, 0)
    return fmt.Tensor(arr.shape[1:] if batch else arr.shape, dt)


def sample_count(batch: Mapping[str, Any], schema: Mapping[str, fmt.Field], start: int = 0) -> int:
    """Number of samples in ``batch``; every schema field present, all of the same length."""
    if not isinstance(batch, Mapping):
        raise SchemaError(f"expected a dict of field -> values, got {type(batch).__name__}")
    missing, extra = set(schema) - set(batch), set(batch) - set(schema)
    if missing or extra:
        raise SchemaError(
            f"sample {start}: fields {sorted(batch)} do not match the schema {sorted(schema)} "
            f"(missing {sorted(missing)}, unexpected {sorted(extra)})"
        )
    lengths = {}
    for k, v in batch.items():
        if isinstance(v, (str, bytes, bytearray, memoryview)):  # len() would count characters
            raise SchemaError(
                f"field {k!r}: a batch needs a list or array of samples, got one "
                f"{type(v).__name__} ({v[:32]!r}); wrap it in a list for one sample"
            )
        try:
            lengths[k] = len(v)
        except TypeError:
            raise SchemaError(
                f"field {k!r}: a batch needs a sequence or array, got {v!r}"
            ) from None
    if len(set(lengths.values())) > 1:
        raise SchemaError(f"samples {start}+: fields have different lengths {lengths}")
    return next(iter(lengths.values()))


def _cast(
    arr: np.ndarray, src: str, native: bool, f: fmt.Field, name: str, index: int
) -> np.ndarray:
    """``arr`` in the field's storage dtype, refusing lossy conversions of arrays."""
    target = fmt.storage_dtype(f.dtype)
    if src == f.dtype:
        return np.ascontiguousarray(arr, dtype=target)
    lossless = "bfloat16" not in (src, f.dtype) and np.can_cast(src, target, "safe")
    if native and f.dtype != "bfloat16":
        with np.errstate(over="ignore", invalid="ignore"):  # a lossy cast is refused below
            out = arr.astype(target)
        if np.array_equal(out.astype(arr.dtype), arr, equal_nan=arr.dtype.kind in "fc"):
            return out
    elif lossless:
        return np.ascontiguousarray(arr, dtype=target)
    raise SchemaError(
        f"field {name!r}, sample {index}: dtype {src} does not fit the schema dtype {f.dtype}; "
        "cast it first (or declare the field with that dtype)"
    )


class Promote(Exception):
    """Internal: the field must change kind/shape to take this sample (schema was inferred)."""

    def __init__(self, field: fmt.Field):
        self.field = field


class VarBatch(NamedTuple):
    """A batch of a values+offsets field: flat values, per-sample lengths, optional shapes."""

    values: np.ndarray
    lengths: np.ndarray
    shapes: np.ndarray | None


def _widen(old: fmt.Field, shape: tuple[int, ...], dtype: str, auto: bool, name: str, i: int):
    """Raise Promote (inferred schema) or SchemaError for a sample that does not fit ``old``."""
    fixed = old.shape if isinstance(old, fmt.Tensor) else (None, *old.inner_shape)
    if auto and dtype == old.dtype and len(shape) == len(fixed) and len(shape) > 0:
        inner = tuple(None if a != b else a for a, b in zip(fixed[1:], shape[1:], strict=True))
        raise Promote(fmt.Ragged(old.dtype, inner))
    want = "(n, " + ", ".join(map(str, fixed[1:])) + ")" if fixed[:1] == (None,) else str(fixed)
    hint = "" if auto else "; declare it as chute.Ragged(...) for variable shapes"
    raise SchemaError(f"field {name!r}, sample {i}: shape {shape} does not match {want}{hint}")


def prepare(values: Any, f: fmt.Field, name: str, start: int, auto: bool) -> np.ndarray | VarBatch:
    """Check and convert a batch of ``values`` for field ``f`` (raises Promote / SchemaError)."""
    if isinstance(f, fmt.Tensor):
        if isinstance(values, (list, tuple)):
            rows = []
            for i, v in enumerate(values):
                arr, dt, native = to_array(v, name, start + i)
                if arr.shape != f.shape:
                    _widen(f, arr.shape, dt, auto, name, start + i)
                rows.append(_cast(arr, dt, native, f, name, start + i))
            return np.stack(rows) if rows else np.empty((0, *f.shape), fmt.storage_dtype(f.dtype))
        arr, dt, native = to_array(values, name, start)
        if arr.shape[1:] != f.shape:
            _widen(f, arr.shape[1:], dt, auto, name, start)
        return _cast(arr, dt, native, f, name, start)
    pieces, lengths, shapes = [], [], []
    for i, v in enumerate(values):
        if isinstance(f, (fmt.Bytes, fmt.String)):
            arr = _var_bytes(v, f, name, start + i)
        else:
            arr, dt, native = to_array(v, name, start + i)
            fixed = (None, *f.inner_shape)
            if arr.ndim != len(fixed) or any(
                b is not None and a != b for a, b in zip(arr.shape, fixed, strict=True)
            ):
                _widen(f, arr.shape, dt, auto, name, start + i)
            arr = _cast(arr, dt, native, f, name, start + i)
        pieces.append(arr.reshape(-1) if f.variable_dims else arr)
        lengths.append(len(pieces[-1]))
        shapes.append(arr.shape)
    sd = fmt.storage_dtype(f.dtype)
    inner = () if f.variable_dims else f.inner_shape
    flat = np.concatenate(pieces) if pieces else np.empty((0, *inner), sd)
    shape_arr = np.array(shapes, np.int64).reshape(len(shapes), -1) if f.variable_dims else None
    return VarBatch(flat, np.array(lengths, np.int64), shape_arr)


class _ArrayFile:
    """Rows appended to one .npy file; the header is rewritten with the final shape at close."""

    def __init__(self, path: Path, dtype: np.dtype, inner: tuple[int, ...]):
        self.path, self.dtype, self.inner = path, dtype, inner
        self.rows = 0
        self.hash = xxhash.xxh3_64()
        self.file = open(path, "wb")  # noqa: SIM115 - closed in close()/abort()
        self.file.write(header_bytes(dtype, (0, *inner)))
        self.synced = 0  # bytes before this offset have had their writeback started

    def write(self, arr: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
        self.file.write(data)
        self.hash.update(data)
        self.rows += len(arr)
        end = self.file.tell()
        if end - self.synced >= WRITEBACK_BYTES:
            self.file.flush()
            start_writeback(self.file.fileno(), self.synced, end - self.synced)
            self.synced = end

    def close(self) -> fmt.FileInfo:
        self.file.seek(0)
        self.file.write(header_bytes(self.dtype, (self.rows, *self.inner)))
        self.file.flush()
        os.fsync(self.file.fileno())
        size = self.file.seek(0, os.SEEK_END)
        self.file.close()
        return fmt.FileInfo(size, self.hash.hexdigest())

    def abort(self) -> None:
        self.file.close()


class ColumnWriter:
    """The open files of field ``name`` in one part folder."""

    def __init__(self, folder: Path, name: str, f: fmt.Field):
        self.name, self.field = name, f
        names = fmt.field_files(name, f)
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        sd = fmt.storage_dtype(f.dtype)
        if isinstance(f, fmt.Tensor):
            self.files = {"data": _ArrayFile(folder / names["data"], sd, f.shape)}
            return
        inner = () if f.variable_dims else f.inner_shape
        self.files = {
            "values": _ArrayFile(folder / names["values"], sd, inner),  # type: ignore[arg-type]
            "offsets": _ArrayFile(folder / names["offsets"], fmt.OFFSETS_DTYPE, ()),
        }
        if f.variable_dims:
            ndim = 1 + len(f.inner_shape)
            self.files["shapes"] = _ArrayFile(folder / names["shapes"], fmt.SHAPES_DTYPE, (ndim,))
        self.total = 0
        self.files["offsets"].write(np.zeros(1, np.int64))

    def write(self, batch: np.ndarray | VarBatch) -> None:
        if isinstance(batch, np.ndarray):
            self.files["data"].write(batch)
            return
        self.files["values"].write(batch.values)
        self.files["offsets"].write(self.total + np.cumsum(batch.lengths))
        self.total += int(batch.lengths.sum())
        if batch.shapes is not None:
            self.files["shapes"].write(batch.shapes)

    def close(self) -> dict[str, fmt.FileInfo]:
        names = fmt.field_files(self.name, self.field)
        return {names[role]: af.close() for role, af in self.files.items()}

    def abort(self) -> None:
        for af in self.files.values():
            af.abort()


def promote(
    folder: Path, name: str, old: fmt.Field, new: fmt.Field, col: ColumnWriter | None, n: int
) -> ColumnWriter:
    """Rewrite field ``name`` of a part from layout ``old`` to ``new`` (a Ragged field).

    ``col`` is the field's open writer (None for a part already closed). Returns an open
    writer for the new layout, holding the ``n`` samples already written.
    """
    if col is not None:
        col.close()
    old_files = {r: folder / fn for r, fn in fmt.field_files(name, old).items()}
    arrays = {r: np.load(p, mmap_mode="r", allow_pickle=False) for r, p in old_files.items()}
    for p in old_files.values():  # the maps keep the data alive; free the names for the new files
        os.replace(p, p.with_name(p.name + ".old"))
    out = ColumnWriter(folder, name, new)
    if isinstance(old, fmt.Tensor):  # a promoted Tensor has ndim >= 1 (see _widen)
        rows = arrays["data"].reshape(n * old.shape[0], *old.shape[1:])
        row_len = np.full(n, old.shape[0], np.int64)
        shapes = np.tile(np.array(old.shape, np.int64), (n, 1))
    else:
        rows = arrays["values"]
        row_len = np.diff(arrays["offsets"])
        shapes = arrays.get("shapes")
        if shapes is None:
            shapes = np.column_stack([row_len, np.tile(old.inner_shape, (n, 1))]).astype(np.int64)
    assert isinstance(new, fmt.Ragged)
    lengths = row_len * math.prod(rows.shape[1:]) if new.variable_dims else row_len
    starts = np.concatenate([[0], np.cumsum(row_len)])
    step = max(
        1,
        _COPY_CHUNK
        // max(1, rows.itemsize * math.prod(rows.shape[1:]) * int(row_len.max(initial=1))),
    )
    for a in range(0, n, step):
        b = min(n, a + step)
        chunk = rows[starts[a] : starts[b]]
        values = chunk.reshape(-1) if new.variable_dims else chunk
        out.write(VarBatch(values, lengths[a:b], shapes[a:b] if new.variable_dims else None))
    del arrays
    for p in old_files.values():
        p.with_name(p.name + ".old").unlink()
    return out
