"""A dataset's files, for the reader: the checked snapshot that ``open()`` builds, and
read-only maps.

:func:`snapshot` reads the manifest (:mod:`chute.manifest_file`) and checks the files, again if a
writer replaced the dataset meanwhile, and returns a :class:`Snapshot`: the manifest, the
selected fields, the parts, and the :class:`Files` that map them. :class:`Files` checks each
data file as the dataset is opened: inside the dataset folder, a regular file, as big as the
manifest says and as its sample count and shape need, so a truncated file fails at open and
not mid-epoch; and it keeps the file's identity (device, inode, size, mtime). A file is
memory-mapped on first use, after checking that it is still the file ``open()`` saw: a dataset
replaced since ``open()`` (``overwrite=True``) is thus a :class:`DatasetChangedError`, never a
mix of the old and the new data.

Maps are read-only (``PROT_READ``): reads share the OS page cache across processes, and
nothing in the process can change what later reads see (a write into a map raises). A map
holds no file descriptor (Python's ``mmap`` keeps a duplicate open per map: a dataset of
600 parts would need 600+ descriptors under a default ``ulimit -n`` of 1024): the file is
opened, mapped, closed. Out of descriptors, opening one is a
:class:`~chute.errors.DescriptorLimitError` naming the limit, never a corrupt-dataset error;
out of maps (each file of each part read is one: ``vm.max_map_count``, 65530 by default) or
of address space (``ulimit -v``), mapping one is a :class:`~chute.errors.MapLimitError`
naming the limit, likewise.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import functools
import math
import mmap
import os
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import format as fmt
from .. import kinds
from ..errors import DatasetChangedError, FormatError, MapLimitError, SchemaError
from ..manifest_file import (
    Identity,
    file_identity,
    load_manifest,
    manifest_changed,
    stat_file,
    unreadable,
)
from ..npy_header import MAX_HEADER_BYTES, check_size, read_header

OPEN_TRIES = 3  # open() reads the manifest again when the dataset was replaced meanwhile


@dataclass(frozen=True)
class Part:
    """One part of an open dataset: ``num_samples`` consecutive samples from ``start``, in the
    files of ``folder`` (``files``: file name -> size and checksum, from the manifest)."""

    name: str
    folder: Path
    start: int
    num_samples: int
    files: Mapping[str, kinds.FileInfo]


class Snapshot(NamedTuple):
    """What ``open()`` checked: the manifest, the selected fields, the parts, their files."""

    manifest: kinds.Manifest
    schema: dict[str, kinds.Field]
    parts: tuple[Part, ...]
    files: Files


def check(
    path: Path,
    manifest: kinds.Manifest,
    fields: Sequence[str] | None,
    in_memory: bool,
    opened: Mapping[str, Identity] | None,
    files: Files | None = None,
) -> Snapshot:
    """The dataset of ``manifest`` at ``path``, its fields ``fields`` (None: all) selected and
    every file of them stat'ed (by ``files``, default a local :class:`Files`; a remote
    dataset's cache passes its own: :mod:`chute.reader.remote`). ``opened``: the file
    identities seen by the ``open()`` this copy comes from (unpickling, to_memory). A file
    that is not the one ``open()`` saw is not an error here but makes every read raise: in a
    spawned worker an error while unpickling kills the process without a message, while an
    error in a read reaches the main process."""
    if isinstance(fields, str):
        raise SchemaError("fields= takes a list of field names, not a string")
    unknown = [f for f in fields or () if f not in manifest.fields]
    if unknown:
        raise SchemaError(
            f"{path}: no field(s) {unknown}; the dataset has {sorted(manifest.fields)}"
        )
    schema = {k: v for k, v in manifest.fields.items() if fields is None or k in fields}
    files = Files(path, in_memory, opened) if files is None else files
    parts = []
    start = 0
    for info in manifest.parts:
        part = Part(info.name, path / info.name, start, info.num_samples, info.files)
        files.check_part(part, schema)
        parts.append(part)
        start += info.num_samples
    return Snapshot(manifest, schema, tuple(parts), files)


def snapshot(path: Path, fields: Sequence[str] | None, in_memory: bool) -> Snapshot:
    """Read the manifest and :func:`check` the files; again if the manifest changed meanwhile.
    A writer may replace the dataset (``overwrite=True``, ``chute.cache``) between the two:
    then what failed or passed the checks may be the other version's (a file "missing" or of
    the wrong size that is not). Up to :data:`OPEN_TRIES` times."""
    for _ in range(OPEN_TRIES):
        try:
            manifest, identity = load_manifest(path)
            try:
                snap = check(path, manifest, fields, in_memory, None)
            except FormatError:  # a file missing or resized: corrupt, or replaced?
                if not manifest_changed(path, identity):
                    raise
            else:
                if not manifest_changed(path, identity):
                    return snap
        except DatasetChangedError:
            pass
        time.sleep(0.001)  # the other half of a two-rename replace (no atomic swap)
    raise DatasetChangedError(
        f"{path} was replaced {OPEN_TRIES} times while opening it (writers with "
        "overwrite=True or chute.cache rebuilding it): open it again"
    )


def _data_nbytes(f: kinds.Field, role: str, n: int) -> int | None:
    """Bytes after the header of file ``role`` of a part of ``n`` samples (None: values)."""
    shape = f.expected_shape(role, n)
    if shape is None or role == "values":
        return None
    itemsize = fmt.storage_dtype(f.role_dtype(role)).itemsize
    return math.prod(shape) * itemsize


class Files:
    """The data files of the dataset at ``path``: checked part by part as it is opened
    (:meth:`check_part`), mapped, or read when ``in_memory``, field by field on use
    (:meth:`column`).

    ``opened``: the file identities seen by the ``open()`` this copy comes from (unpickling,
    to_memory), None in that ``open()`` itself. A file that is not the one ``open()`` saw is
    not an error while checking: it sets :attr:`stale`, and every :meth:`column` raises
    (see :func:`check`). :attr:`identity` holds each checked file's identity.
    """

    def __init__(self, path: Path, in_memory: bool, opened: Mapping[str, Identity] | None):
        self.path = path
        self.in_memory = in_memory
        self._opened = opened
        self._root = os.path.realpath(path)
        self.identity: dict[str, Identity] = dict(opened or {})
        self.allocated: dict[str, int] = {}  # bytes on disk (st_blocks), when checked
        self.stale: Path | None = None  # a file replaced since open()
        # (part name, field) -> its mapped files (path, identity): rechecked per read
        self._mapped: dict[tuple[str, str], tuple[tuple[str, Identity], ...]] = {}
        self._loaded: dict[str, Identity] = {}  # identity of each file when it was mapped

    def check_part(self, part: Part, schema: Mapping[str, kinds.Field]) -> None:
        """Check the files of the fields ``schema`` in ``part``."""
        for name, f in schema.items():
            for role, fn in f.files(name).items():
                data = _data_nbytes(f, role, part.num_samples)
                self._check_file(part.folder / fn, part.files[fn].nbytes, data)

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
        identity = file_identity(st)
        if opened is not None and opened.get(str(file)) != identity:
            self.stale = self.stale or file
            return
        self.identity[str(file)] = identity
        self.allocated[str(file)] = st.st_blocks * 512 if hasattr(st, "st_blocks") else 0
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

    def same_file(self, file: Path, st: os.stat_result) -> bool:
        """Whether the open ``file`` (its ``fstat``) is the file ``open()`` checked: same
        device, inode, size and mtime (a remote cache compares with the manifest instead)."""
        return file_identity(st) == self.identity[str(file)]

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
                if not self.same_file(file, st):
                    raise self.changed(file)
                self._loaded[str(file)] = file_identity(st)  # what recheck compares with
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
                    f.readinto(arr.reshape(-1).view(np.uint8).data)
                else:
                    try:
                        buf = map_readonly(f.fileno(), st.st_size)
                    except OSError as exc:
                        if exc.errno != errno.ENOMEM:
                            raise
                        raise map_limit(file, exc) from None
                    arr = np.frombuffer(buf, got, nbytes // got.itemsize, offset)
                    arr = arr.reshape(got_shape)
        except FileNotFoundError:  # gone since open(): the dataset was replaced or removed
            raise self.changed(file) from None
        except MapLimitError:
            raise
        except OSError as exc:  # a symlink loop made since open(), permissions...
            raise unreadable(file, exc) from None
        arr.flags.writeable = False
        return arr

    def recheck(self, part: Part, name: str) -> None:
        """Check that the mapped files of field ``name`` in ``part`` are still the files
        ``open()`` saw (``os.stat``: device, inode, size, mtime; about 1 us a file), else
        :class:`DatasetChangedError`. The loaders' reads call it after each gather, so a
        file rewritten in place (``cp new/. d/``, a write through ``np.load(mmap_mode="r+")``)
        fails the batch that may hold new data instead of mixing versions silently; ``ds[i]``
        at most every :data:`~chute.reader.dataset.RECHECK_INTERVAL` and after a failed
        read. Files not mapped yet are checked when they are mapped; in-memory copies need no
        check."""
        for file, identity in self._mapped.get((part.name, name), ()):
            try:
                st = os.stat(file)
            except OSError:
                raise self.changed(Path(file)) from None
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != identity:
                raise self.changed(Path(file))

    def column(self, part: Part, name: str, f: kinds.Field) -> dict[str, np.ndarray]:
        """The arrays of field ``name`` in ``part``: ``data``, or ``values`` and ``offsets``
        (and ``shapes``), checked against the manifest."""
        if self.stale is not None:
            raise self.changed(self.stale)
        col = self._column(part, name, f)
        if not self.in_memory:
            paths = [str(part.folder / fn) for fn in f.files(name).values()]
            self._mapped[part.name, name] = tuple((p, self._loaded[p]) for p in paths)
        return col

    def _column(self, part: Part, name: str, f: kinds.Field) -> dict[str, np.ndarray]:
        folder, n = part.folder, part.num_samples
        files = f.files(name)
        col = {
            role: self._load(folder / fn, f.role_dtype(role), f.expected_shape(role, n))
            for role, fn in files.items()
        }
        if "offsets" in col:
            values, offsets = col["values"], col["offsets"]
            inner = f.expected_shape("values", n, 0)[1:]  # type: ignore[index]
            if values.shape[1:] != inner or offsets[0] != 0 or offsets[-1] != len(values):
                raise FormatError(
                    f"{folder / files['values']}: values {values.shape} do not match the "
                    f"offsets (0..{int(offsets[-1])}) and inner shape {inner}"
                )
        return col


def map_readonly(fd: int, size: int) -> memoryview:
    """A read-only, shared map of the ``size`` (> 0) bytes of open file ``fd`` that does not
    keep ``fd`` (nor a duplicate) open: the caller closes it; the map lives until nothing
    refers to the returned view. Python 3.13's ``mmap(trackfd=False)``, else libc's mmap."""
    if sys.version_info >= (3, 13):
        kw = {"trackfd": False}  # keyword of 3.13+
        return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ, **kw))
    libc = _libc()
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:  # MAP_FAILED
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    buf = (ctypes.c_char * size).from_address(addr)
    unmap = weakref.finalize(buf, libc.munmap, addr, size)
    # not at interpreter exit: weakref's exit hook runs the newest finalizers first, so a map
    # made by a loader's worker would be unmapped before the loader's own finalizer has
    # stopped that worker, which may still be reading it (a segfault); the process's end
    # releases the map anyway
    unmap.atexit = False
    return memoryview(buf).cast("B").toreadonly()


def map_limit(file: Path, exc: OSError) -> MapLimitError:
    """The error for ``mmap`` failing with ENOMEM: the process is out of maps or of address
    space (never a fault of the dataset), with the numbers that tell which."""
    import resource

    with builtins.open("/proc/self/maps", "rb") as f:
        maps = sum(1 for _ in f)
    try:
        with builtins.open("/proc/sys/vm/max_map_count") as f:
            most = int(f.read())
    except (OSError, ValueError):
        most = -1
    space = resource.getrlimit(resource.RLIMIT_AS)[0]
    at = "no limit" if space == resource.RLIM_INFINITY else f"{space} bytes"
    err = MapLimitError(
        f"{file} cannot be memory-mapped: {exc.strerror}: this process holds {maps} maps of "
        f"the {most} that vm.max_map_count allows (each file of each part read is one), and "
        f"its address space limit (ulimit -v) is {at}; the dataset is fine. Raise the map "
        "limit (sysctl -w vm.max_map_count=1048576, as root) or the address space limit, or "
        "map fewer files: open only the fields needed (chute.open(path, fields=[...])), "
        "write the dataset in fewer, larger parts (part_size=), or open fewer datasets at "
        "once"
    )
    err.errno = exc.errno
    return err


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,  # off_t: 64 bits on the 64-bit POSIX systems chute runs on
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc
