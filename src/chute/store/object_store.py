"""The contract between chute and an object store: what the remote reader, its cache, upload
and download ask of one. :class:`~chute.store.client.Store` (obstore: S3, GCS, Azure, HTTP,
``file://``) implements it; so does :class:`~chute.store.folder.FolderStore`, a plain local
folder with no dependency, for fast tests and offline use."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from .url import URL


@runtime_checkable
class ObjectStore(Protocol):
    """Objects under one dataset URL, by relative key (``relpath``: ``"chute.json"``,
    ``"part-00000/x.npy"``). A missing object is a :class:`~chute.errors.DatasetNotFoundError`
    naming its URL; a write replaces the object whole (readers see the old or the new one).

    ``url``: the dataset's URL; ``stats``: this process's request counts (``get``, ``put``,
    ``bytes_in``, ``bytes_out``, ``retries``)."""

    url: URL
    stats: dict[str, int]

    def get_bytes(self, relpath: str, limit: int = ...) -> bytes:
        """The whole object (small ones: the manifest), at most ``limit`` bytes (more is a
        :class:`~chute.store.client.CorruptObjectError`)."""
        ...

    def get_to_file(
        self, relpath: str, file: Any, *, size: int, zstd: bool = False, out: int | None = None
    ) -> tuple[int, str]:
        """Stream the object (``size`` bytes, as the manifest says) into the open binary
        ``file`` (decompressed when ``zstd``, into at most ``out`` bytes); returns its stored
        size and xxh3_64 hex digest. Another size, more than ``out`` decompressed, or bad zstd
        data is a :class:`~chute.store.client.CorruptObjectError`."""
        ...

    def put_file(self, path: str | os.PathLike, relpath: str) -> None:
        """Upload the local file ``path``."""
        ...

    def put_chunks(self, relpath: str, chunks: Callable[[], Iterable[bytes]]) -> None:
        """Upload what ``chunks()`` yields (called again on a retry)."""
        ...

    def put_bytes(self, relpath: str, data: bytes) -> None:
        """Upload ``data`` in one request (the manifest: the commit)."""
        ...

    def head(self, relpath: str) -> dict[str, Any] | None:
        """``{"size", "e_tag", "last_modified"}``, or None when there is no such object."""
        ...

    def delete(self, relpath: str) -> None:
        """Delete the object (no error if it does not exist)."""
        ...

    def list(self, relprefix: str = "") -> list[str]:
        """The keys under ``relprefix``, relative to the dataset URL."""
        ...
