"""A dataset's files, for the reader: the manifest, checks at open, identities, read-only maps.

:func:`read_manifest` reads and validates ``chute.json``; :func:`load` reads it and checks the
files, again if a writer replaced the dataset meanwhile. :class:`Files` checks each data file
as the dataset is opened: inside the dataset folder, a regular file, as big as the manifest
says and as its sample count and shape need, so a truncated file fails at open and not
mid-epoch; and it keeps the file's identity (device, inode, size, mtime). A file is
memory-mapped on first use, after checking that it is still the file ``open()`` saw: a dataset
replaced since ``open()`` (``overwrite=True``) is thus a :class:`DatasetChangedError`, never a
mix of the old and the new data.

Maps are read-only (``ACCESS_READ``): reads share the OS page cache across processes, and
nothing in the process can change what later reads see (a write into a map raises).
"""

from __future__ import annotations

import builtins
import glob
import json
import math
import mmap
import os
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import format as fmt
from .errors import DatasetChangedError, DatasetNotFoundError, FormatError, UnsafePathError
from .npyio import MAX_HEADER_BYTES, check_size, read_header

MAX_MANIFEST_BYTES = 256 << 20
OPEN_TRIES = 3  # open() reads the manifest again when the dataset was replaced meanwhile
Identity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def stat_file(file: Path, root: str) -> os.stat_result:
    """``os.stat`` of ``file``, which must resolve to a regular file inside the folder ``root``
    (a real path): no symlink out of the dataset, no FIFO or device that would block."""
    real = os.path.realpath(file)
    if not real.startswith(root + os.sep):
        raise UnsafePathError(f"{file} resolves to {real}, outside the dataset {root}")
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"{file} is not a regular file; a dataset holds only plain files")
    return st


def _identity(st: os.stat_result) -> Identity:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON readers disagree on which duplicate wins: refuse, so that every tool reads the same.
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise FormatError(f"duplicate key {key!r} in the manifest")
        seen.add(key)
    return dict(pairs)


def read_manifest(path: str | os.PathLike) -> fmt.Manifest:
    """Read and validate ``PATH/chute.json``."""
    return load_manifest(Path(path))[0]


def load_manifest(path: Path) -> tuple[fmt.Manifest, Identity]:
    """Read and validate ``PATH/chute.json``; also its identity, which changes when the dataset
    is replaced or appended to (see :func:`manifest_changed`). A manifest that vanishes while
    it is read is a :class:`DatasetChangedError` (the dataset is being replaced)."""
    file = path / fmt.MANIFEST
    folder = _folder_identity(path)
    if folder is None:
        if path.is_dir() or any(path.parent.glob(f".{glob.escape(path.name)}.old-*")):
            # Between the two renames of a replace without an atomic swap (or a writer died
            # there: the old dataset is in that folder until the next write to path).
            raise _replaced(path)
        raise DatasetNotFoundError(f"{path}: no such dataset folder")
    try:
        st = stat_file(file, os.path.realpath(path))
    except FileNotFoundError:
        if _folder_identity(path) != folder or file.exists():  # a writer renamed it away
            raise _replaced(path) from None
        raise DatasetNotFoundError(
            f"{path} is not a chute dataset: it has no {fmt.MANIFEST} "
            "(an unfinished write leaves none)"
        ) from None
    if st.st_size > MAX_MANIFEST_BYTES:
        raise FormatError(f"{file}: manifest of {st.st_size} bytes is too large")
    try:
        with builtins.open(file, "rb") as f:
            identity = _identity(os.fstat(f.fileno()))
            if identity != _identity(st):  # the file stat_file checked was swapped meanwhile
                raise _replaced(path)
            text = f.read()
    except FileNotFoundError:
        raise _replaced(path) from None
    try:
        obj = json.loads(text.decode("utf-8"), object_pairs_hook=_unique_keys)
    except FormatError as exc:
        raise FormatError(f"{file}: {exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(f"{file}: not valid JSON ({exc})") from None
    try:
        return fmt.parse_manifest(obj), identity
    except FormatError as exc:
        raise type(exc)(f"{file}: {exc}") from None


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder ``path``, None if it is not a folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def manifest_changed(path: Path, identity: Identity) -> bool:
    """Whether ``PATH/chute.json`` is no longer the file of ``identity`` (replaced, appended
    to, or gone): then what was checked after reading it may belong to another dataset."""
    try:
        return _identity(os.stat(path / fmt.MANIFEST)) != identity
    except OSError:
        return True


def _replaced(path: Path) -> DatasetChangedError:
    return DatasetChangedError(
        f"{path} was replaced while opening it (a writer with overwrite=True, or chute.cache, "
        "swapped it): open it again"
    )


def load(path: Path, setup: Callable[[fmt.Manifest], None]) -> None:
    """Read the manifest and ``setup(manifest)``, which checks the files; again if the manifest
    changed meanwhile. A writer may replace the dataset (``overwrite=True``, ``chute.cache``)
    between the two: then what failed or passed the checks may be the other version's (a
    file "missing" or of the wrong size that is not). Up to :data:`OPEN_TRIES` times."""
    for _ in range(OPEN_TRIES):
        try:
            manifest, identity = load_manifest(path)
            try:
                setup(manifest)
            except FormatError:  # a file missing or resized: corrupt, or replaced?
                if not manifest_changed(path, identity):
                    raise
            else:
                if not manifest_changed(path, identity):
                    return
        except DatasetChangedError:
            pass
        time.sleep(0.001)  # the other half of a two-rename replace (no atomic swap)
    raise DatasetChangedError(
        f"{path} was replaced {OPEN_TRIES} times while opening it (writers with "
        "overwrite=True or chute.cache rebuilding it): open it again"
    )


def _data_nbytes(f: fmt.Field, role: str, n: int) -> int | None:
    """Bytes after the header of file ``role`` of a part of ``n`` samples (None: values)."""
    shape = fmt.expected_shape(f, role, n)
    if shape is None or role == "values":
        return None
    itemsize = fmt.storage_dtype(f.dtype).itemsize if role == "data" else 8
    return math.prod(shape) * itemsize


class Files:
    """The data files of the dataset at ``path``: checked part by part as it is opened
    (:meth:`check_part`), mapped, or read when ``in_memory``, field by field on use
    (:meth:`column`).

    ``opened``: the file identities seen by the ``open()`` this copy comes from (unpickling,
    to_memory), None in that ``open()`` itself. A file that is not the one ``open()`` saw is
    not an error while checking: it sets :attr:`stale`, and every :meth:`column` raises
    (see ``Dataset._setup``). :attr:`identity` holds each checked file's identity.
    """

    def __init__(self, path: Path, in_memory: bool, opened: Mapping[str, Identity] | None):
        self.path = path
        self.in_memory = in_memory
        self._opened = opened
        self._root = os.path.realpath(path)
        self.identity: dict[str, Identity] = dict(opened or {})
        self.stale: Path | None = None  # a file replaced since open()

    def check_part(self, folder: Path, info: fmt.PartInfo, schema: Mapping[str, fmt.Field]) -> None:
        """Check the files of the fields ``schema`` in part ``info`` (in ``folder``)."""
        for name, f in schema.items():
            for role, fn in fmt.field_files(name, f).items():
                data = _data_nbytes(f, role, info.num_samples)
                self._check_file(folder / fn, info.files[fn].nbytes, data)

    def _check_file(self, file: Path, nbytes: int, data: int | None) -> None:
        """The file is as big as the manifest says, and that is what the manifest's sample
        count and shape need (``data`` bytes, None when only the offsets tell) plus a header:
        so nothing is ever sized from a count or shape that the files do not back. Its
        identity is recorded (and must be ``opened``'s when given)."""
        opened = self._opened
        try:
            st = stat_file(file, self._root)
        except FileNotFoundError:
            if opened is None:
                raise FormatError(f"{file} is missing; the dataset is incomplete") from None
            self.stale = self.stale or file
            return
        identity = _identity(st)
        if opened is not None and opened.get(str(file)) != identity:
            self.stale = self.stale or file
            return
        self.identity[str(file)] = identity
        if st.st_size != nbytes:
            raise FormatError(
                f"{file} is {st.st_size} bytes but the manifest says {nbytes}: the file was "
                "truncated or modified after writing"
            )
        if data is not None and not 0 < nbytes - data <= MAX_HEADER_BYTES:
            raise FormatError(
                f"{file} is {nbytes} bytes but the manifest's sample count and shape need "
                f"{data} bytes of data plus a header; the manifest does not describe this file"
            )

    def changed(self, file: Path) -> DatasetChangedError:
        """The error for ``file`` not being the file ``open()`` saw."""
        return DatasetChangedError(
            f"{self.path} was replaced or modified since chute.open(): {file} is not the file "
            "that was opened; open the dataset again"
        )

    def _load(self, file: Path, dtype: str, shape: tuple[int, ...] | None) -> np.ndarray:
        """Map (or read, when in memory) one .npy file after checking that it is the file
        ``open()`` saw and its header; the array is read-only."""
        want = fmt.storage_dtype(dtype)
        try:
            with builtins.open(file, "rb") as f:
                st = os.fstat(f.fileno())
                if _identity(st) != self.identity[str(file)]:
                    raise self.changed(file)
                got, got_shape, offset = read_header(f, str(file))
                if got != want or (shape is not None and got_shape != shape):
                    raise FormatError(
                        f"{file}: holds {got_shape} {got} but the manifest says {shape} {want}"
                    )
                check_size(str(file), got, got_shape, offset, st.st_size)
                nbytes = st.st_size - offset
                if nbytes == 0:
                    arr = np.zeros(got_shape, got)
                elif self.in_memory:
                    arr = np.empty(got_shape, got)
                    f.readinto(memoryview(arr.reshape(-1).view(np.uint8)))
                else:
                    buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    arr = np.frombuffer(buf, got, nbytes // got.itemsize, offset)
                    arr = arr.reshape(got_shape)
        except FileNotFoundError:  # gone since open(): the dataset was replaced or removed
            raise self.changed(file) from None
        arr.flags.writeable = False
        return arr

    def column(self, folder: Path, name: str, f: fmt.Field, n: int) -> dict[str, np.ndarray]:
        """The arrays of field ``name`` in the part of ``n`` samples in ``folder``: ``data``,
        or ``values`` and ``offsets`` (and ``shapes``), checked against the manifest."""
        if self.stale is not None:
            raise self.changed(self.stale)
        files = fmt.field_files(name, f)
        if isinstance(f, fmt.Tensor):
            return {"data": self._load(folder / files["data"], f.dtype, (n, *f.shape))}
        offsets = self._load(folder / files["offsets"], "int64", (n + 1,))
        values = self._load(folder / files["values"], f.dtype, None)
        inner = () if f.variable_dims else f.inner_shape
        if values.shape[1:] != inner or offsets[0] != 0 or offsets[-1] != len(values):
            raise FormatError(
                f"{folder / files['values']}: values {values.shape} do not match the "
                f"offsets (0..{int(offsets[-1])}) and inner shape {inner}"
            )
        col = {"values": values, "offsets": offsets}
        if f.variable_dims:
            col["shapes"] = self._load(
                folder / files["shapes"], "int64", (n, 1 + len(f.inner_shape))
            )
        return col
