"""Where a remote dataset's cache lives, and the checks of what is in it: the default cache
folder, a URL's sub-folder, whether a download is the file it should be, and the
error for a full or unwritable disk under the cache."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
from pathlib import Path
from typing import Any, BinaryIO

import xxhash

from ..errors import CacheError, FormatError
from ..manifest_file import file_checksum
from ..npy_header import MAGIC, length_width, read_header
from .remote_manifest import Entry


def default_cache_dir() -> Path:
    """``$CHUTE_CACHE_DIR``, else ``$XDG_CACHE_HOME/chute``, else ``~/.cache/chute``."""
    if os.environ.get("CHUTE_CACHE_DIR"):
        return Path(os.environ["CHUTE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "chute"


def folder_name(url: str) -> str:
    """The cache sub-folder of a URL: its last segment (readable) and a hash (unique)."""
    tail = re.sub(r"[^A-Za-z0-9_.\-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:64]
    return f"{tail or 'dataset'}-{xxhash.xxh3_64_hexdigest(url.encode())[:16]}"


class PayloadHash:
    """A binary file being downloaded into, hashing what is written after the .npy header as
    it goes (the manifest's checksum: see :func:`chute.manifest_file.file_checksum`), so the
    download need not be read back to be checked. ``seek(0)`` (a retry) starts over."""

    def __init__(self, file: BinaryIO):
        self.file = file
        self.seek(0)

    def seek(self, pos: int, whence: int = 0) -> int:
        if (pos, whence) != (0, 0):
            raise io.UnsupportedOperation("PayloadHash seeks to the start only")
        self._head = b""
        self.offset: int | None = None  # of the data, once the header's length is written
        self._hash = xxhash.xxh3_64()
        self._written = 0
        return self.file.seek(0)

    def truncate(self, size: int | None = None) -> int:
        return self.file.truncate(size)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        at = self._written
        self._written += len(view)
        if self.offset is None:
            self._head += bytes(view[: _HEAD - len(self._head)])
            if len(self._head) >= _HEAD:  # the data starts after the (>= 64 byte) header
                at_length, width = len(MAGIC) + 2, length_width(self._head)
                size = int.from_bytes(self._head[at_length : at_length + width], "little")
                self.offset = at_length + width + size
        if self.offset is not None and at + len(view) > self.offset:
            self._hash.update(view[max(0, self.offset - at) :])
        return self.file.write(view)

    def flush(self) -> None:
        self.file.flush()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


_HEAD = len(MAGIC) + 2 + 4  # magic, version, the header's length (2 or 4 bytes)


def mismatch(tmp: Path, entry: Entry, got: tuple[int, str], written: PayloadHash) -> str:
    """Why the downloaded ``tmp`` (written through ``written``) is not ``entry`` ('' when it
    is)."""
    if entry.stored is not None and got != entry.stored:
        return f"stored object is {got[0]} bytes, xxh3 {got[1]}; the manifest says {entry.stored}"
    size = os.path.getsize(tmp)
    if size != entry.nbytes:
        return f"{size} bytes but the manifest says {entry.nbytes}"
    try:
        with open(tmp, "rb") as f:
            offset = read_header(f, str(tmp))[2]
        checksum = written.hexdigest() if offset == written.offset else file_checksum(tmp)
    except FormatError as exc:
        return f"not a valid .npy file ({exc})"
    if checksum != entry.checksum:
        return f"xxh3 {checksum} but the manifest says {entry.checksum}"
    return ""


def disk_error(exc: OSError, folder: Path, doing: str) -> OSError:
    """A :class:`CacheError` naming the cache folder for a full disk or an unwritable folder;
    other errors as they are."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            free = -1
        return CacheError(
            f"the disk under the cache folder {folder} is full ({exc.strerror}; {free} bytes "
            f"free) while {doing}: free space, set cache_limit below the free space, or pass "
            "another cache_dir"
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return CacheError(
            f"the cache folder {folder} is not writable ({exc.strerror}) while {doing}: pass "
            "a writable cache_dir (or set CHUTE_CACHE_DIR)"
        )
    return exc
