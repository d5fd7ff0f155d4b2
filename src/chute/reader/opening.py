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
    cache_budget: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    verify_cache: bool = False,
    retry: float | None = None,
    timeout: float | None = None,
) -> Dataset:
    """Open the dataset at ``path`` lazily: reads the manifest and checks each file's size, so
    its time grows with the number of files (~0.1 s for 1,000 parts), never with the samples.

    ``fields`` restricts reading to some fields. The path is made absolute, so a later
    ``chdir`` does not change which files are read.

    ``path`` may be a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``): parts
    are then downloaded into a node-local cache under ``cache_dir`` (default
    ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``) when first read, keeping at most
    ``cache_limit`` bytes of this dataset (``"20GB"``; None: no eviction) and, with
    ``cache_budget`` (default ``$CHUTE_CACHE_BUDGET``), at most that many bytes in the whole
    ``cache_dir``, every dataset and job of the node together (least-recently-used files of
    any dataset evicted first; see :mod:`chute.store.budget`); ``storage_options`` go to the
    storage client (credentials come from the provider's environment variables otherwise);
    ``verify_cache=True`` checks each cached file's checksum once per process (a bad copy is
    downloaded again). ``retry``: seconds during which a failing request is retried (default
    120: an outage of a minute is ridden out); ``timeout``: seconds within which the answer
    and each 1 MiB of a body must come (see ``docs/remote.md``). See also
    :mod:`chute.reader.remote`.
    """
    if is_url(path):
        from .remote import RemoteDataset  # a Dataset subclass: imported when used

        assert isinstance(path, str)
        return RemoteDataset(
            path,
            fields,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            cache_budget=cache_budget,
            storage_options=storage_options,
            verify_cache=verify_cache,
            retry=retry,
            timeout=timeout,
        )
    remote_only = (cache_dir, cache_limit, cache_budget, storage_options, retry, timeout)
    if any(v is not None for v in remote_only):
        raise ArgumentError(
            "cache_dir, cache_limit, cache_budget, storage_options, retry and timeout apply to "
            f"URLs (s3://...), not to the local path {path!r}"
        )
    return Dataset(path, fields)
