"""Upload a finished local dataset to a URL, parts first and the manifest last
(:func:`upload`; see :mod:`chute.transfer` for the format), and :class:`Staged`: a local
staging folder for a writer whose destination is a URL, uploaded part by part.

A low layer (manifest, store): the writer and the converters stage through it, so
``chute.write("s3://...")`` writes each part locally and uploads it as soon as it is
finished, deleting the local copy; the manifest goes last.
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
from .. import kinds
from ..errors import ArgumentError, ArgumentValueError, DatasetExistsError, require
from ..manifest_file import read_manifest
from .client import CHUNK, EXTRA, Store
from .object_store import ObjectStore
from .paths import default_cache_dir, folder_name
from .remote_manifest import ZSTD_SUFFIX
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
    """Upload the local dataset ``src`` to ``url`` (``s3://``, ``gs://``, ``az://``,
    ``file://``): the part files, ``workers`` at a time, then the manifest, so an upload
    that fails leaves no dataset at ``url``. Returns the store.

    >>> chute.upload("train.chute", "s3://bucket/data/train.chute", compression="zstd")

    ``storage_options``: the store's options (endpoint, region, credentials; see
    ``docs/remote.md``), as for :func:`chute.open`. ``compression``: None or ``"zstd"`` (at
    ``level``; the cache and :func:`chute.download` decompress). A dataset already at
    ``url`` is a :class:`~chute.DatasetExistsError` unless ``overwrite``: then its manifest
    is deleted first and its files the new version lacks after the commit. Same as
    ``chute upload SRC URL``."""
    check_compression(compression)
    store = writable(url if isinstance(url, ObjectStore) else Store(url, storage_options))
    src = Path(src)
    manifest = read_manifest(src)  # a finished, valid local dataset
    before = _uncommit(store, overwrite)
    files = [_relpath(info, fn) for info in manifest.parts for fn in info.files]
    stored = _send(store, src, files, compression, level, workers)
    _commit(store, manifest, stored, compression, before)
    return store


def check_compression(compression: str | None) -> None:
    if compression not in (None, "zstd"):
        raise ArgumentError(f"compression must be None or 'zstd', got {compression!r}")


def _relpath(info: kinds.PartInfo, fn: str) -> str:
    return fn if info.name == fmt.ROOT_PART else f"{info.name}/{fn}"


def _uncommit(store: ObjectStore, overwrite: bool) -> set[str]:
    """Refuse an existing dataset at the store's URL, or (``overwrite``) delete its manifest
    first, so that no reader opens a mix of versions; returns the keys there before."""
    if store.head(fmt.MANIFEST) is not None:
        if not overwrite:
            exc = DatasetExistsError(
                f"{store.url} already holds a chute dataset; pass overwrite=True to replace it"
            )
            exc.replaceable = True
            raise exc
        store.delete(fmt.MANIFEST)
    return set(store.list()) if overwrite else set()


def _send(
    store: ObjectStore,
    src: Path,
    files: list[str],
    compression: str | None,
    level: int,
    workers: int,
) -> dict[str, dict[str, Any]]:
    """Upload each file ``REL`` of ``files`` (under folder ``src``) in parallel; returns the
    stored size and checksum of each compressed one."""

    def send(rel: str) -> tuple[str, dict[str, Any] | None]:
        if compression is None:
            store.put_file(src / rel, rel)
            return rel, None
        return rel, _put_zstd(store, src / rel, rel + ZSTD_SUFFIX, level)

    with ThreadPoolExecutor(max(1, workers), "chute-upload") as pool:
        sent = list(pool.map(send, files))  # raises the first failure
    return {rel: record for rel, record in sent if record is not None}


def _commit(
    store: ObjectStore,
    manifest: kinds.Manifest,
    stored: Mapping[str, dict[str, Any]],
    compression: str | None,
    before: set[str],
) -> None:
    """Upload the manifest of the files already sent (the commit), then delete the files of
    the version it replaced."""
    obj = manifest.to_json()
    keep = set()
    for i, info in enumerate(manifest.parts):
        for fn in info.files:
            rel = _relpath(info, fn)
            if compression is not None:
                obj["parts"][i]["files"][fn]["stored"] = stored[rel]
            keep.add(rel + (ZSTD_SUFFIX if compression else ""))
    if compression is not None:
        obj["compression"] = compression
    store.put_bytes(fmt.MANIFEST, json.dumps(obj, indent=1).encode())  # the commit
    for key in sorted(before - keep):
        if key.endswith(_DATA_SUFFIXES):  # the replaced version's files
            store.delete(key)


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
    """A writer's destination URL, uploaded part by part.

    The writer writes each part into :attr:`local` (a new folder under ``staging_dir``,
    default ``CACHE_DIR/.staging``); :meth:`send_part` uploads a finished part and deletes
    its local files, so a writer's local disk peaks at about one part beside the one being
    written; :meth:`finish` uploads the manifest last (a failed or killed write leaves no
    openable dataset) and removes the staging folder. :meth:`upload` instead sends a whole
    finished local dataset at :attr:`local`; :meth:`discard` removes the staging folder
    without committing. An existing dataset at the URL is refused now, before anything is
    written, unless ``overwrite`` (its manifest is deleted before the first upload)."""

    def __init__(
        self,
        url: str,
        *,
        overwrite: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        compression: str | None = None,
        staging_dir: str | os.PathLike | None = None,
    ):
        check_compression(compression)
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
        self._before: set[str] | None = None  # keys at the URL before the first upload
        self._stored: dict[str, dict[str, Any]] = {}  # compressed files: stored size, xxh3

    def upload(self) -> str:
        """Upload the committed local dataset, then remove it; returns the URL."""
        try:
            upload(self.local, self.store, compression=self.compression, overwrite=self.overwrite)
        finally:
            self.discard()
        return self.url

    def send_part(self, staging: Path, info: kinds.PartInfo) -> None:
        """Upload the files of the finished part ``info`` in ``staging``, then delete them."""
        if self._before is None:
            self._before = _uncommit(self.store, self.overwrite)
        files = [_relpath(info, fn) for fn in info.files]
        self._stored.update(_send(self.store, staging, files, self.compression, 3, 8))
        for rel in files:
            (staging / rel).unlink()

    def restore_part(self, staging: Path, info: kinds.PartInfo) -> None:
        """Download the files of part ``info`` (sent before) back into ``staging``: a writer
        that turns a field ragged rewrites the parts written so far."""
        for fn, entry in info.files.items():
            rel = _relpath(info, fn)
            key = rel + (ZSTD_SUFFIX if self.compression else "")
            size = self._stored[rel]["bytes"] if self.compression else entry.nbytes
            with open(staging / rel, "wb") as f:
                self.store.get_to_file(
                    key, f, size=size, zstd=self.compression is not None, out=entry.nbytes
                )

    def finish(self, manifest: kinds.Manifest) -> str:
        """Upload ``manifest`` (of the parts sent), the commit; remove the staging folder."""
        try:
            before = (
                self._before if self._before is not None else _uncommit(self.store, self.overwrite)
            )
            _commit(self.store, manifest, self._stored, self.compression, before)
        finally:
            self.discard()
        return self.url

    def discard(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
