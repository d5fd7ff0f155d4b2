"""Copy a finished dataset between a local folder and a URL: :func:`upload`, :func:`download`.

Upload sends the part files first and the manifest last: the manifest is the commit, so an
upload that fails or is killed leaves no openable dataset at the URL (its parts, without a
manifest, are ignored and overwritten by the next upload). Replacing a dataset
(``overwrite=True``) first deletes the old manifest, so no reader opens a mix, and after the
commit deletes the old version's files that the new one does not have.

``compression="zstd"`` stores each part file as ``REL.zst`` (streamed, never whole in memory)
and records in the manifest, beside each file's size and checksum (of the decompressed
``.npy``, as for a local dataset), the stored object's size and xxh3_64::

    "compression": "zstd",
    "parts": [{"files": {"x.npy": {"bytes": 4128, "xxh3_64": "...",
                                   "stored": {"bytes": 1650, "xxh3_64": "..."}}}}]

A local reader ignores both keys; the cache decompresses into its folder, so reads stay
memory-mapped. Download goes through the cache's checked path (:class:`RemoteCache`) into a
staging folder that is committed atomically like any chute write.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

from . import format as fmt
from .errors import ArgumentError, DatasetExistsError, require
from .manifest import read_manifest
from .store.cache import META, RemoteCache
from .store.client import CHUNK, EXTRA, Store
from .store.manifest import ZSTD_SUFFIX
from .store.url import URL
from .writer.commit import commit, new_staging_dir

_DATA_SUFFIXES = (".npy", ".npy" + ZSTD_SUFFIX)


def upload(
    src: str | os.PathLike,
    url: str | URL | Store,
    *,
    storage_options: Mapping[str, Any] | None = None,
    compression: str | None = None,
    level: int = 3,
    overwrite: bool = False,
    workers: int = 8,
) -> Store:
    """Upload the local dataset ``src`` to ``url``: parts in parallel (``workers``), then the
    manifest. ``compression``: None or ``"zstd"`` (at ``level``). Returns the store."""
    if compression not in (None, "zstd"):
        raise ArgumentError(f"compression must be None or 'zstd', got {compression!r}")
    store = url if isinstance(url, Store) else Store(url, storage_options)
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


def _put_zstd(store: Store, path: Path, key: str, level: int) -> dict[str, Any]:
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


def download(
    url: str | URL | Store,
    dst: str | os.PathLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    workers: int = 4,
) -> Path:
    """Download the dataset at ``url`` into the local folder ``dst`` (every file checked,
    zstd files decompressed), committed atomically. Returns ``dst``."""
    store = url if isinstance(url, Store) else Store(url, storage_options)
    dst = Path(dst)
    staging = new_staging_dir(dst, overwrite)
    try:
        cache = RemoteCache(store, folder=staging)
        manifest = cache.open()
        with ThreadPoolExecutor(max(1, workers), "chute-download") as pool:
            for _ in pool.map(cache.ensure, list(cache.entries)):
                pass
        cache.close()
        shutil.rmtree(staging / META)
        (staging / fmt.MANIFEST).unlink()  # commit writes it, last
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return commit(staging, dst, manifest.fields, list(manifest.parts), manifest.metadata, overwrite)
