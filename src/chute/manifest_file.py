"""Every read and write of ``chute.json``, the manifest, and the file identities it is
checked by.

:func:`load_manifest` reads and validates it (bounded in size, no duplicate keys, every field
and part name checked by :mod:`chute.format`) and returns its identity (device, inode, size,
mtime), which changes when the dataset is replaced or appended to (:func:`manifest_changed`).
:func:`write_manifest` writes it atomically: temp file, fsync, ``os.replace``, fsync of the
folder. A folder without a manifest is not a dataset, so writing it is every writer's commit.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import glob
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import xxhash

from . import format as fmt
from . import kinds
from .errors import (
    ChuteError,
    DatasetChangedError,
    DatasetNotFoundError,
    DescriptorLimitError,
    FormatError,
    SchemaError,
    UnsafePathError,
)
from .npy_header import read_header
from .sniff import not_a_dataset

_CHUNK = 16 << 20  # read at once by file_checksum
MAX_MANIFEST_BYTES = 64 << 20
"""A larger chute.json is refused before it is read: parsing JSON takes ~10x its size in
memory. 64 MiB holds the parts of tens of thousands of parts (~1.5 KB each with checksums)."""
MAX_METADATA_BYTES = 16 << 20
"""The user metadata in chute.json, as JSON: every worker process receives the dataset
(metadata included), so it must stay small; large side data belongs in a field or a file."""
MAX_METADATA_DEPTH = 100
"""Lists and dicts nested in the user metadata, at most: the worker processes receive it
pickled, and pickle (like ``json``) recurses once per level."""
Identity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def stat_file(file: Path, root: str) -> os.stat_result:
    """``os.stat`` of ``file``, which must resolve to a regular file inside the folder ``root``
    (a real path): no symlink out of the dataset, no FIFO or device that would block."""
    real = os.path.realpath(file)
    if not real.startswith(root + os.sep):
        raise UnsafePathError(f"{file} resolves to {real}, outside the dataset {root}")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a symlink loop (ELOOP), a name too long, no permission...
        raise unreadable(file, exc) from None
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"{file} is not a regular file; a dataset holds only plain files")
    return st


def unreadable(file: Path, exc: OSError) -> ChuteError:
    """The error for a dataset file that exists but cannot be read (``stat`` or ``open``):
    a :class:`DescriptorLimitError` when the process is out of descriptors, else a
    :class:`FormatError`."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        err = DescriptorLimitError(
            f"{file} cannot be opened: {exc.strerror} (this process may hold {soft} open "
            f"files, hard limit {hard}); the dataset is fine. Close files the job keeps open, "
            "or raise the limit (ulimit -n, or resource.setrlimit(RLIMIT_NOFILE))"
        )
        err.errno = exc.errno
        return err
    why = exc.strerror or type(exc).__name__
    return FormatError(
        f"{file} cannot be read ({why}, errno {exc.errno}): a dataset holds plain readable "
        "files; fix or replace it (a symlink loop, permissions), or write the dataset again"
    )


def file_identity(st: os.stat_result) -> Identity:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON readers disagree on which duplicate wins: refuse, so that every tool reads the same.
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise FormatError(f"duplicate key {key!r} in the manifest")
        seen.add(key)
    return dict(pairs)


def read_manifest(path: str | os.PathLike) -> kinds.Manifest:
    """Read and validate ``PATH/chute.json``."""
    return load_manifest(Path(path))[0]


def load_manifest(path: Path) -> tuple[kinds.Manifest, Identity]:
    """Read and validate ``PATH/chute.json``; also its identity, which changes when the dataset
    is replaced or appended to (see :func:`manifest_changed`). A manifest that vanishes while
    it is read is a :class:`DatasetChangedError` (the dataset is being replaced)."""
    file = path / fmt.MANIFEST
    folder = _folder_identity(path)
    if folder is None:
        if _being_replaced(path):
            raise replaced(path)
        raise DatasetNotFoundError(not_a_dataset(path) or f"{path}: no such dataset folder")
    try:
        st = stat_file(file, os.path.realpath(path))
    except FileNotFoundError:
        if _folder_identity(path) != folder or file.exists():  # a writer renamed it away
            raise replaced(path) from None
        raise DatasetNotFoundError(
            not_a_dataset(path)
            or f"{path} is not a chute dataset: it has no {fmt.MANIFEST} "
            "(an unfinished write leaves none)"
        ) from None
    if st.st_size > MAX_MANIFEST_BYTES:
        raise FormatError(
            f"{file}: a manifest of {st.st_size:,} bytes is too large (the limit is "
            f"{MAX_MANIFEST_BYTES:,}): large metadata belongs in a field, and a dataset of "
            "that many parts should be written with a larger part_size"
        )
    try:
        with builtins.open(file, "rb") as f:
            identity = file_identity(os.fstat(f.fileno()))
            if identity != file_identity(st):  # the file stat_file checked was swapped meanwhile
                raise replaced(path)
            text = f.read()
    except FileNotFoundError:
        raise replaced(path) from None
    return parse_manifest_bytes(text, str(file))[0], identity


def parse_manifest_bytes(raw: bytes, where: str) -> tuple[kinds.Manifest, dict[str, Any]]:
    """Decode and validate the bytes of a ``chute.json`` (read from disk or fetched from a
    bucket): the manifest and the decoded JSON object; every problem is a :class:`FormatError`
    naming ``where``."""
    try:
        obj = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(f"{where}: not a chute manifest: not valid JSON ({exc})") from None
    try:
        manifest = kinds.parse_manifest(obj)
        check_metadata(manifest.metadata, FormatError)
    except FormatError as exc:
        raise type(exc)(f"{where}: {exc}") from None
    return manifest, obj


def check_metadata(metadata: Any, error: type[Exception]) -> None:
    """The metadata nests at most :data:`MAX_METADATA_DEPTH` levels and is, as JSON, at most
    :data:`MAX_METADATA_BYTES`; else ``error``."""
    depth, level = _depth(metadata), MAX_METADATA_DEPTH
    if depth > level:
        raise error(
            f"metadata nests lists and dicts {depth} levels deep, the limit is {level}: every "
            "worker process receives it; flatten it, or put it in a field or a file"
        )
    size = len(json.dumps(metadata))
    if size > MAX_METADATA_BYTES:
        raise error(
            f"metadata of {size:,} bytes (as JSON) is too large, the limit is "
            f"{MAX_METADATA_BYTES:,}: every worker receives it; put large data in a field"
        )


def _depth(value: Any) -> int:
    """Levels of lists and dicts in ``value`` (0 for a scalar), counted without recursion and
    only up to one past the limit."""
    deepest, todo = 0, [(value, 0)]
    while todo and deepest <= MAX_METADATA_DEPTH:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, (dict, list, tuple)):
            deepest = max(deepest, level + 1)
            todo.extend((child, level + 1) for child in children)
    return deepest


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder ``path``, None if it is not a folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _being_replaced(path: Path) -> bool:
    """Whether ``path`` is between the two renames of a replace without an atomic swap (or a
    writer died there: the old dataset is in that folder until the next write to path): the
    old folder beside it, or the new one in place by now. Looked for old, new, old: a writer
    can end a replace (rename in, remove the old) between two of these calls, and begin the
    next one."""
    old = f".{glob.escape(path.name)}.old-*"
    return any(path.parent.glob(old)) or path.is_dir() or any(path.parent.glob(old))


def manifest_changed(path: Path, identity: Identity) -> bool:
    """Whether ``PATH/chute.json`` is no longer the file of ``identity`` (replaced, appended
    to, or gone): then what was checked after reading it may belong to another dataset."""
    try:
        return file_identity(os.stat(path / fmt.MANIFEST)) != identity
    except OSError:
        return True


def replaced(path: Path) -> DatasetChangedError:
    return DatasetChangedError(
        f"{path} was replaced while opening it (a writer with overwrite=True, or chute.cache, "
        "swapped it): open it again"
    )


def file_checksum(path: Path) -> str:
    """xxh3_64 of the bytes after the .npy header (the header is checked by ``open``)."""
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        read_header(f, str(path))
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def write_manifest(folder: Path, manifest: kinds.Manifest) -> None:
    """Write ``folder/chute.json`` atomically (temp file, fsync, ``os.replace``)."""
    try:
        text = json.dumps(manifest.to_json(), indent=1, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"metadata must be JSON-serialisable: {exc}") from None
    check_metadata(manifest.metadata, SchemaError)
    # a new name (O_EXCL, random, no link followed): a name planted in advance is never opened
    tmp = folder / (fmt.MANIFEST + f".tmp-{os.getpid()}-{secrets.token_hex(6)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with open(os.open(tmp, flags, 0o644), "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / fmt.MANIFEST)
    except BaseException:  # e.g. a full disk: leave no half-written temp file behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)


def fsync_dir(path: Path) -> None:
    """Make the renames and new entries in folder ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
