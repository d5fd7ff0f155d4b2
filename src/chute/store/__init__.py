"""Datasets in object storage (S3, GCS, Azure, HTTP, file://): URLs, a per-process client,
a bounded node-local cache, prefetch in read order.

``chute.open(url, ...)`` reads through these pieces (``chute/reader/remote.py``), and
``chute.write(url, ...)`` / ``chute.Writer(url)`` upload through ``chute/store/upload.py``.
Needs the ``remote`` extra (``pip install 'chute[remote]'``: obstore, zstandard), imported
lazily.
"""

from .cache import RemoteCache
from .client import Store
from .folder import FolderStore
from .locks import Pin
from .object_store import ObjectStore
from .paths import default_cache_dir
from .prefetch import Prefetcher
from .remote_manifest import Entry
from .url import URL, is_url, parse_url

__all__ = [
    "URL",
    "Entry",
    "FolderStore",
    "ObjectStore",
    "Pin",
    "Prefetcher",
    "RemoteCache",
    "Store",
    "default_cache_dir",
    "is_url",
    "parse_url",
]
