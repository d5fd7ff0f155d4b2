"""Upload a finished local dataset to a URL, parts first and the manifest last
(:func:`upload`; see :mod:`chute.transfer` for the format), and :class:`Staged`: a local
staging folder for a writer whose destination is a URL, uploaded when it commits.

A low layer (manifest, store): the writer and the converters stage through it, so
``chute.write("s3://...")`` writes locally, then uploads.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

from .. import format as fmt
from ..errors import ArgumentError, ArgumentValueError, DatasetExistsError, require
from ..manifest import read_manifest
from .client import CHUNK, EXTRA, Store
from .manifest import ZSTD_SUFFIX
from .object_store import ObjectStore
from .paths import default_cache_dir, folder_name
from .url import URL

_DATA_SUFFIXES = (".npy", ".npy" + ZSTD_SUFFIX)


def writable(store: ObjectStore) -> ObjectStore:
    """``store``, refused now (before anything is staged or sent) if its URL cannot be
    written: http(s):// is read-only."""
    if store.url.scheme in ("http", "https"):
        raise ArgumentValueError(
            f"{store.url}: http(s):// URLs are read-only (a web server takes no uploads): write "
            "to s3://, gs://, az:// or file://, or write a local folder and serve it"
        )
    return store


def upload(
    src: str | os.PathLike,
    url: str | URL | ObjectStore,
    *,
    storage_options: Mapping[str, Any] | None = None,
    compression: str | None = None,
    level: int = 3,
    overwrite: bool = False,
    workers: int = 8,
) -> ObjectStore:
    """Upload the local dataset ``src`` to ``url``: parts in parallel (``workers``), then the
    manifest. ``compression``: None or ``"zstd"`` (at ``level``). Returns the store."""
    if compression not in (None, "zstd"):
        raise ArgumentError(f"compression must be None or 'zstd', got {compression!r}")
    store = writable(url if isinstance(url, ObjectStore) else Store(url, storage_options))
    src = Path(src)
    manifest = read_manifest(src)  # a finished, valid local dataset
    if store.head(fmt.MANIFEST) is not None:
        if not overwrite:
            raise DatasetExistsError(
                f"{store.url} already holds a chute dataset; pass overwrite=True to replace it"
            )
        store.delete(fmt.MANIFEST)  # uncommit first: no reader opens a mix of versions
    before = set(store.list()) if overwrite else set()
    obj = manifest.to_json()
    files = [
        (rel, obj["parts"][i]["files"][fn])
        for i, info in enumerate(manifest.parts)
        for fn in info.files
        for rel in [fn if info.name == fmt.ROOT_PART else f"{info.name}/{fn}"]
    ]

    def send(item: tuple[str, dict[str, Any]]) -> None:
        rel, record = item
        if compression is None:
            store.put_file(src / rel, rel)
        else:
            record["stored"] = _put_zstd(store, src / rel, rel + ZSTD_SUFFIX, level)

    with ThreadPoolExecutor(max(1, workers), "chute-upload") as pool:
        for _ in pool.map(send, files):  # raises the first failure
            pass
    if compression is not None:
        obj["compression"] = compression
    store.put_bytes(fmt.MANIFEST, json.dumps(obj, indent=1).encode())  # the commit
    keep = {rel + (ZSTD_SUFFIX if compression else "") for rel, _ in files}
    for key in sorted(before - keep):
        if key.endswith(_DATA_SUFFIXES):  # the replaced version's files
            store.delete(key)
    return store


def _put_zstd(store: ObjectStore, path: Path, key: str, level: int) -> dict[str, Any]:
    """Upload ``path`` zstd-compressed as ``key``, streamed; returns the stored size and
    xxh3_64 (of the last attempt: a retry compresses again)."""
    zstandard = require("zstandard", EXTRA)
    result: dict[str, Any] = {}

    def chunks() -> Iterator[bytes]:
        h, n = xxhash.xxh3_64(), 0
        cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
        with open(path, "rb") as f:
            for chunk in cctx.read_to_iter(f, read_size=CHUNK, write_size=CHUNK):
                h.update(chunk)
                n += len(chunk)
                yield chunk
        result.update({"bytes": n, fmt.CHECKSUM: h.hexdigest()})

    store.put_chunks(key, chunks)
    return result


class Staged:
    """A writer's destination URL: the dataset is written to :attr:`local` (a new folder
    under ``staging_dir``, default ``CACHE_DIR/.staging``), then :meth:`upload` sends it
    (parts, then the manifest: a failed upload leaves no openable dataset) and removes the
    local copy; :meth:`discard` removes it without uploading. An existing dataset at the URL
    is refused now, before anything is written, unless ``overwrite``."""

    def __init__(
        self,
        url: str,
        *,
        overwrite: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        compression: str | None = None,
        staging_dir: str | os.PathLike | None = None,
    ):
        self.store = writable(Store(url, storage_options))
        self.url = self.store.url.url
        self.overwrite = overwrite
        self.compression = compression
        if not overwrite and self.store.head(fmt.MANIFEST) is not None:
            raise DatasetExistsError(
                f"{self.url} already holds a chute dataset; pass overwrite=True to replace it"
            )
        root = Path(staging_dir) if staging_dir is not None else default_cache_dir() / ".staging"
        self._root = (root / f"{folder_name(self.url)}-{secrets.token_hex(4)}").absolute()
        self._root.mkdir(parents=True)
        self.local = self._root / (self.url.rsplit("/", 1)[-1] or "dataset")

    def upload(self) -> str:
        """Upload the committed local dataset, then remove it; returns the URL."""
        try:
            upload(self.local, self.store, compression=self.compression, overwrite=self.overwrite)
        finally:
            self.discard()
        return self.url

    def discard(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
