"""What a read from a store can find wrong with an object, and the file a download is
written into, bounded: shared by every way of reading one (:mod:`chute.store.client`,
:mod:`chute.store.signed`, :mod:`chute.store.folder`)."""

from __future__ import annotations

from typing import Any, Protocol


class CorruptObjectError(Exception):
    """A stored object could not be decoded (bad zstd data), or is not the size expected:
    the cache treats it as a checksum mismatch (refetched once, then a ChecksumError)."""


class StalledError(Exception):
    """A request got no answer, or a download no progress, within the timeout (retried)."""


def _want(limit: int, exact: bool) -> str:
    return f"the manifest says {limit}" if exact else f"more than the {limit} allowed"


class Sink(Protocol):
    """Where a download is written: an open binary file, or a wrapper of one."""

    def write(self, data: Any, /) -> int: ...
    def flush(self) -> None: ...
    def seek(self, pos: int, whence: int = 0, /) -> int: ...
    def truncate(self, size: int | None = None, /) -> int: ...


class _LocalError(Exception):
    """A local write failed during a download: not retried, re-raised as the original."""

    def __init__(self, exc: OSError):
        self.exc = exc


class _Capped:
    """The file a download is written into, refusing to grow past ``limit`` bytes (a zstd
    frame that inflates beyond the file it should be is cut, not written out)."""

    def __init__(self, file: Sink, relpath: str, limit: int):
        self.file, self.relpath, self.limit, self.n = file, relpath, limit, 0

    def write(self, data: Any) -> int:
        self.n += memoryview(data).nbytes
        if self.n > self.limit:
            raise CorruptObjectError(
                f"{self.relpath}: decompresses to over {self.limit} bytes, the manifest's size"
            )
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def _write(sink: Any, chunk: bytes | None, relpath: str) -> None:
    """Write (or flush, for None) into the download's sink: a local error is not retried,
    undecodable data is a corrupt object."""
    try:
        if chunk is None:
            sink.flush()
        else:
            sink.write(chunk)
    except OSError as exc:
        raise _LocalError(exc) from None
    except Exception as exc:  # zstandard.ZstdError: not a zstd frame, or a corrupted one
        raise CorruptObjectError(f"{relpath}: cannot decompress: {exc}") from None
