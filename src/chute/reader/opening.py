"""``chute.open``: a local dataset folder, or a URL read through a node-local cache."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ArgumentError
from ..store.url import is_url
from .dataset import Dataset


def open(
    path: str | bytes | os.PathLike,
    fields: Sequence[str] | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    retry: float | None = None,
    timeout: float | None = None,
) -> Dataset:
    """Open the dataset at ``path`` lazily: O(1) in its size (reads the manifest only).

    ``fields`` restricts reading to some fields. The path is made absolute, so a later
    ``chdir`` does not change which files are read.

    ``path`` may be a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``): parts
    are then downloaded into a node-local cache under ``cache_dir`` (default
    ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``) when first read, keeping at most
    ``cache_limit`` bytes (``"20GB"``; None: no eviction); ``storage_options`` go to the
    storage client (credentials come from the provider's environment variables otherwise).
    ``retry``: seconds during which a failing request is retried (default 120: an outage of
    a minute is ridden out); ``timeout``: seconds without a byte after which a request is
    cut and retried (default 30). See ``docs/remote.md`` and :mod:`chute.reader.remote`.
    """
    if is_url(path):
        from .remote import RemoteDataset  # a Dataset subclass: imported when used

        assert isinstance(path, str)
        return RemoteDataset(
            path,
            fields,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            storage_options=storage_options,
            retry=retry,
            timeout=timeout,
        )
    remote_only = (cache_dir, cache_limit, storage_options, retry, timeout)
    if any(v is not None for v in remote_only):
        raise ArgumentError(
            f"cache_dir, cache_limit, storage_options, retry and timeout apply to URLs "
            f"(s3://...), not to the local path {path!r}"
        )
    return Dataset(path, fields)
