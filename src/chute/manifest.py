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
import glob
import json
import os
import stat
from pathlib import Path
from typing import Any

from . import format as fmt
from .errors import (
    DatasetChangedError,
    DatasetNotFoundError,
    FormatError,
    SchemaError,
    UnsafePathError,
)

MAX_MANIFEST_BYTES = 256 << 20
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
            raise replaced(path)
        raise DatasetNotFoundError(f"{path}: no such dataset folder")
    try:
        st = stat_file(file, os.path.realpath(path))
    except FileNotFoundError:
        if _folder_identity(path) != folder or file.exists():  # a writer renamed it away
            raise replaced(path) from None
        raise DatasetNotFoundError(
            f"{path} is not a chute dataset: it has no {fmt.MANIFEST} "
            "(an unfinished write leaves none)"
        ) from None
    if st.st_size > MAX_MANIFEST_BYTES:
        raise FormatError(f"{file}: manifest of {st.st_size} bytes is too large")
    try:
        with builtins.open(file, "rb") as f:
            identity = file_identity(os.fstat(f.fileno()))
            if identity != file_identity(st):  # the file stat_file checked was swapped meanwhile
                raise replaced(path)
            text = f.read()
    except FileNotFoundError:
        raise replaced(path) from None
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
        return file_identity(os.stat(path / fmt.MANIFEST)) != identity
    except OSError:
        return True


def replaced(path: Path) -> DatasetChangedError:
    return DatasetChangedError(
        f"{path} was replaced while opening it (a writer with overwrite=True, or chute.cache, "
        "swapped it): open it again"
    )


def write_manifest(folder: Path, manifest: fmt.Manifest) -> None:
    """Write ``folder/chute.json`` atomically (temp file, fsync, ``os.replace``)."""
    try:
        text = json.dumps(manifest.to_json(), indent=1, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"metadata must be JSON-serialisable: {exc}") from None
    tmp = folder / (fmt.MANIFEST + f".tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as f:
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
