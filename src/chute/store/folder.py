"""An :class:`~chute.store.object_store.ObjectStore` over a plain local folder, in Python
alone (no obstore, no server): the remote reader, its cache, upload and download run against
it in fast unit tests; the tests against a real S3-protocol server remain the check of
:class:`~chute.store.client.Store`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import xxhash

from ..errors import ArgumentError, DatasetNotFoundError, require
from ..manifest_file import MAX_MANIFEST_BYTES
from .bounds import CorruptObjectError, _Capped, _LocalError, _want, _write
from .client import EXTRA, STREAM_CHUNK
from .url import URL, parse_url

__all__ = ["FolderStore"]


class FolderStore:
    """The objects of a dataset as files under ``root`` (created on first write): key
    ``relpath`` is ``root / relpath``. Writes go to a temporary file renamed into place, so
    a reader sees the old object or the new one, never half of one."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).absolute()
        self.url: URL = parse_url(self.root.as_uri())
        self.stats = {"get": 0, "put": 0, "bytes_in": 0, "bytes_out": 0, "retries": 0}

    def _path(self, relpath: str) -> Path:
        """``root / relpath``; a key with an empty, '.' or '..' segment is refused (it
        would name a file outside the dataset's folder)."""
        if any(s in ("", ".", "..") for s in relpath.split("/")):
            raise ArgumentError(f"{self.url.join(relpath)}: not a key inside the dataset")
        return self.root / relpath

    def _open(self, relpath: str) -> Any:
        try:
            return self._path(relpath).open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise DatasetNotFoundError(f"{self.url.join(relpath)}: no such object") from None

    def get_bytes(self, relpath: str, limit: int = MAX_MANIFEST_BYTES) -> bytes:
        with self._open(relpath) as f:
            data: bytes = f.read(limit + 1)
        if len(data) > limit:
            raise CorruptObjectError(f"{relpath}: over {limit} bytes, {_want(limit, False)}")
        self.stats["get"] += 1
        self.stats["bytes_in"] += len(data)
        return data

    def get_to_file(
        self, relpath: str, file: Any, *, size: int, zstd: bool = False, out: int | None = None
    ) -> tuple[int, str]:
        with self._open(relpath) as src:
            file.seek(0)
            file.truncate()
            sink: Any = _Capped(file, relpath, size if out is None else out)
            if zstd:
                sink = (
                    require("zstandard", EXTRA)
                    .ZstdDecompressor()
                    .stream_writer(sink, closefd=False)
                )
            h, n = xxhash.xxh3_64(), 0
            self.stats["get"] += 1
            try:
                while chunk := src.read(STREAM_CHUNK):
                    n += len(chunk)
                    if n > size:
                        raise CorruptObjectError(
                            f"{relpath}: over {size} bytes, {_want(size, True)}"
                        )
                    h.update(chunk)
                    _write(sink, chunk, relpath)
                _write(sink, None, relpath)
            except _LocalError as exc:
                raise exc.exc from None
        if n != size:
            raise CorruptObjectError(f"{relpath}: {n} bytes, {_want(size, True)}")
        self.stats["bytes_in"] += n
        return n, h.hexdigest()

    def _put(self, relpath: str, chunks: Iterable[bytes]) -> None:
        path = self._path(relpath)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    self.stats["bytes_out"] += len(chunk)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.stats["put"] += 1

    def put_file(self, path: str | os.PathLike, relpath: str) -> None:
        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as f:
                while chunk := f.read(STREAM_CHUNK):
                    yield chunk

        self._put(relpath, chunks())

    def put_chunks(self, relpath: str, chunks: Callable[[], Iterable[bytes]]) -> None:
        self._put(relpath, chunks())

    def put_bytes(self, relpath: str, data: bytes) -> None:
        self._put(relpath, [data])

    def head(self, relpath: str) -> dict[str, Any] | None:
        try:
            st = self._path(relpath).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return {"size": st.st_size, "e_tag": None, "last_modified": st.st_mtime}

    def delete(self, relpath: str) -> None:
        self._path(relpath).unlink(missing_ok=True)

    def list(self, relprefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        keys = (
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        )
        return sorted(k for k in keys if k.startswith(relprefix))

    def __repr__(self) -> str:
        return f"chute.store.FolderStore({str(self.root)!r})"
