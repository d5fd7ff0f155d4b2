"""numpy sources: one ``.npy`` file, a folder of them, an ``.npz`` archive, a dict of arrays.

``.npy`` files are memory-mapped, so rows are read on demand. ``.npz`` members stored without
compression (``np.savez``) are memory-mapped inside the zip; compressed members
(``np.savez_compressed``) are streamed row range by row range. Nothing is ever unpickled.
"""

from __future__ import annotations

import threading
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import FormatError, SourceError
from ..npy_header import read_header
from ..sniff import NOUNS
from .base import ArraySource, FieldsArg

_LOCAL_HEADER = 30  # bytes of a zip local file header before the name and the extra field


def _load(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except PermissionError:
        raise SourceError(f"{path}: not readable (permission denied)") from None
    except ValueError as exc:
        raise SourceError(
            f"{path}: cannot be memory-mapped as an array ({exc}); chute never "
            "loads pickled (object) arrays: save numeric or str arrays"
        ) from None


class NpySource(ArraySource):
    """One ``.npy`` file: a single field named after the file (``images.npy`` -> ``images``)."""

    noun = NOUNS["npy"]

    def __init__(self, path: str | Path, fields: FieldsArg = None, **options: Any):
        path = Path(path)
        super().__init__(str(path), {path.stem: _load(path)}, fields, **options)


class NpyFolderSource(ArraySource):
    """A folder of ``.npy`` files, one field each; sub-folders give names like ``group/name``."""

    noun = NOUNS["npy_folder"]

    def __init__(self, path: str | Path, fields: FieldsArg = None, **options: Any):
        path = Path(path)
        files = sorted(path.rglob("*.npy"))
        if not files:
            raise SourceError(f"{path}: no .npy files in this folder")
        arrays = {f.relative_to(path).with_suffix("").as_posix(): _load(f) for f in files}
        super().__init__(str(path), arrays, fields, **options)


class _CompressedMember:
    """A compressed ``.npz`` member read by row ranges: seek + read on the zip stream.

    Reads come in order (``read_ahead``), so each seek is forward and decompresses only the
    rows skipped; the lock makes concurrent reads of one member safe.
    """

    def __init__(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str):
        self.file = zf.open(info)
        self.shape, self.dtype, self.offset = _npy_header(self.file, where)
        self.where = where
        self.row = self.dtype.itemsize * int(np.prod(self.shape[1:]))
        self.lock = threading.Lock()

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.shape[0])
        n = max(0, stop - start)
        try:
            with self.lock:
                self.file.seek(self.offset + start * self.row)
                data = self.file.read(n * self.row)
        except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
            raise SourceError(f"{self.where}: cannot be decompressed ({exc})") from None
        if len(data) != n * self.row:
            raise SourceError(f"{self.where}: member is truncated (rows {start}:{stop})")
        return np.frombuffer(data, self.dtype).reshape(n, *self.shape[1:])


def _npy_header(f: Any, where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, data offset) of the .npy stream ``f``: C order, no objects. Structured
    dtypes pass: ``split_compound`` stores their members, or the refusal names them."""
    try:
        dtype, shape, offset = read_header(f, where, structured=True)
    except FormatError as exc:
        raise SourceError(str(exc)) from None
    return shape, dtype, offset


def _member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Any:
    where = f"{path}: {info.filename}"
    if info.compress_type != zipfile.ZIP_STORED:
        return _CompressedMember(zf, info, where)
    with zf.open(info) as f:
        shape, dtype, offset = _npy_header(f, where)
    with open(path, "rb") as raw:  # the member's bytes start after its local header
        raw.seek(info.header_offset)
        local = raw.read(_LOCAL_HEADER)
    start = info.header_offset + _LOCAL_HEADER + int.from_bytes(local[26:28], "little")
    start += int.from_bytes(local[28:30], "little")
    return np.memmap(path, dtype, "r", offset=start + offset, shape=shape)


class NpzSource(ArraySource):
    """An ``.npz`` archive (``np.savez`` / ``np.savez_compressed``): one field per member."""

    noun = NOUNS["npz"]

    def __init__(self, path: str | Path, fields: FieldsArg = None, **options: Any):
        path = Path(path)
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise SourceError(f"{path}: cannot be read as an .npz archive ({exc})") from None
        self._members: dict[str, Any] = {}
        try:
            for info in self._zip.infolist():
                if info.filename.endswith(".npy"):
                    self._members[info.filename[: -len(".npy")]] = _member(path, self._zip, info)
            if not self._members:
                raise SourceError(f"{path}: no arrays in this archive")
            super().__init__(str(path), self._members, fields, **options)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for m in self._members.values():
            if isinstance(m, _CompressedMember):
                m.file.close()
        self._zip.close()


def _column(name: str, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            raise SourceError(f"field {name!r}: bfloat16 tensors are written with chute.write()")
        return value.detach().cpu().numpy()
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return value  # np.ndarray, np.memmap, h5py.Dataset, zarr.Array: read by rows
    return np.asarray(value)


class MemorySource(ArraySource):
    """A dict of arrays: numpy, torch (CPU), lists, or lazily-read h5py/zarr arrays."""

    def __init__(self, arrays: Mapping[str, Any], fields: FieldsArg = None, **options: Any):
        columns = {k: _column(k, v) for k, v in arrays.items()}
        super().__init__("<dict of arrays>", columns, fields, **options)
