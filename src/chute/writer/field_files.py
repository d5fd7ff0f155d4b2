"""The writer's files: the appended ``.npy`` files of each field in a part folder.

:class:`FieldWriter` owns the files of one field in one part folder (``data``, or ``values`` +
``offsets`` (+ ``shapes``)); each :class:`_ArrayFile` appends rows, hashes them as they pass
(xxh3, recorded in the manifest) and starts their writeback early. :func:`promote` rewrites a
field whose later samples turned out ragged.

A file that fails (a full disk) is closed all the same, and ``abort`` never raises and never
writes: it drops what is still buffered, since the writer removes the folder right after.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np
import xxhash

from .. import format as fmt
from .. import kinds
from ..columns.var_batch import VarBatch
from ..npy_header import header_bytes
from .commit import libc

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
        data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data
        self.file.write(data)
        self.hash.update(data)
        self.rows += len(arr)
        end = self.file.tell()
        if end - self.synced >= WRITEBACK_BYTES:
            self.file.flush()
            start_writeback(self.file.fileno(), self.synced, end - self.synced)
            self.synced = end

    def close(self) -> kinds.FileInfo:
        try:
            self.file.seek(0)
            self.file.write(header_bytes(self.dtype, (self.rows, *self.inner)))
            self.file.flush()
            os.fsync(self.file.fileno())
            size = self.file.seek(0, os.SEEK_END)
            self.file.close()
        except BaseException:
            self.abort()
            raise
        return kinds.FileInfo(size, self.hash.hexdigest())

    def abort(self) -> None:
        """Close the file without writing what is still buffered (a flush on a full disk
        would fail again); never raises."""
        with contextlib.suppress(OSError, ValueError):
            self.file.raw.close()  # first: closing the buffered file then writes nothing
        with contextlib.suppress(OSError, ValueError):
            self.file.close()


class FieldWriter:
    """The open files of field ``name`` in one part folder."""

    def __init__(self, folder: Path, name: str, f: kinds.Field):
        self.name, self.field = name, f
        self.files: dict[str, _ArrayFile] = {}
        self.total = 0
        try:
            self._open(folder)
        except BaseException:
            self.abort()
            raise

    def _open(self, folder: Path) -> None:
        f, names = self.field, self.field.files(self.name)
        (folder / self.name).parent.mkdir(parents=True, exist_ok=True)
        for role, fn in names.items():
            row = f.expected_shape(role, 0, 0)[1:]  # type: ignore[index]
            self.files[role] = _ArrayFile(folder / fn, fmt.storage_dtype(f.role_dtype(role)), row)
        if "offsets" in self.files:
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
        if batch.sizes is not None:
            self.files["sizes"].write(batch.sizes)

    def close(self) -> dict[str, kinds.FileInfo]:
        names = self.field.files(self.name)
        try:
            return {names[role]: af.close() for role, af in self.files.items()}
        except BaseException:
            self.abort()  # the files not closed yet
            raise

    def abort(self) -> None:
        for af in self.files.values():
            af.abort()


def promote(
    folder: Path, name: str, old: kinds.Field, new: kinds.Field, col: FieldWriter | None, n: int
) -> FieldWriter:
    """Rewrite field ``name`` of a part from layout ``old`` to ``new`` (a Ragged field).

    ``col`` is the field's open writer (None for a part already closed). Returns an open
    writer for the new layout, holding the ``n`` samples already written.
    """
    if col is not None:
        col.close()
    old_files = {r: folder / fn for r, fn in old.files(name).items()}
    arrays = {r: np.load(p, mmap_mode="r", allow_pickle=False) for r, p in old_files.items()}
    for p in old_files.values():  # the maps keep the data alive; free the names for the new files
        os.replace(p, p.with_name(p.name + ".old"))
    out = FieldWriter(folder, name, new)
    if old.fixed:  # a promoted Tensor has ndim >= 1 (see _widen)
        shape = cast(tuple[int, ...], old.sample_shape)
        rows = arrays["data"].reshape(n * shape[0], *shape[1:])
        row_len = np.full(n, shape[0], np.int64)
        shapes = np.tile(np.array(shape, np.int64), (n, 1))
    else:
        rows = arrays["values"]
        row_len = np.diff(arrays["offsets"])
        if "shapes" in arrays:
            shapes = arrays["shapes"]
        else:
            shapes = np.column_stack(
                [row_len, np.tile(np.array(old.sample_shape[1:], np.int64), (n, 1))]
            ).astype(np.int64)
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


class PartFiles:
    """The open files of one part folder."""

    def __init__(self, folder: Path, name: str, schema: Mapping[str, kinds.Field]):
        self.folder, self.name = folder, name
        self.num_samples = 0
        self.fields: dict[str, FieldWriter] = {}
        try:
            folder.mkdir(exist_ok=True)
            for field, f in schema.items():
                self.fields[field] = FieldWriter(folder, field, f)
        except BaseException:
            self.abort()
            raise

    def close(self) -> kinds.PartInfo:
        files: dict[str, kinds.FileInfo] = {}
        try:
            for col in self.fields.values():
                files.update(col.close())
        except BaseException:
            self.abort()  # the fields not closed yet
            raise
        return kinds.PartInfo(self.name, self.num_samples, files)

    def nbytes(self) -> int:
        """Bytes written into the part's files so far."""
        return sum(af.file.tell() for col in self.fields.values() for af in col.files.values())

    def abort(self) -> None:
        """Close every file without writing (never raises); the caller removes the folder."""
        for col in self.fields.values():
            col.abort()
