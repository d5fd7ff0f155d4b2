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

import os
import shutil
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import format as fmt
from .store.cache import META, RemoteCache
from .store.client import Store
from .store.object_store import ObjectStore
from .store.upload import upload
from .store.url import URL
from .writer.commit import commit, new_staging_dir

__all__ = ["download", "upload"]


def download(
    url: str | URL | ObjectStore,
    dst: str | os.PathLike,
    *,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    workers: int = 4,
) -> Path:
    """Download the dataset at ``url`` into the local folder ``dst`` (every file checked
    against the manifest's size and xxh3, zstd files decompressed), ``workers`` files at a
    time, committed atomically. Returns ``dst``.

    >>> chute.download("s3://bucket/data/train.chute", "train.chute")

    ``storage_options``: the store's options, as for :func:`chute.open`. An existing
    ``dst`` is a :class:`~chute.DatasetExistsError` unless ``overwrite``. Same as
    ``chute download URL DST``."""
    store = url if isinstance(url, ObjectStore) else Store(url, storage_options)
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
