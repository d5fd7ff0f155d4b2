"""``chute.cache``: build a dataset once, open it in O(1) ever after.

Concurrent callers (DDP ranks on one machine, several jobs sharing a folder) serialise on the
dataset's lock (:class:`chute.writer.commit.DatasetLock`, an ``flock`` of a file beside the dataset,
the one its writers take). The kernel drops that lock when its holder's file descriptor
closes, including when the process dies (SIGKILL, OOM killer, node preemption of one rank),
so a crashed builder can never leave a stale lock that hangs a job: the next caller gets the
lock and builds. A half-built dataset is never visible, since the writer commits atomically,
and a rebuild swaps the folders in one step where the OS can (:func:`chute.writer.commit.exchange`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import format as fmt
from ._args import check_path
from .conversion import convert
from .errors import SchemaError, SourceError
from .reader.dataset import Dataset
from .reader.opening import open as open_dataset
from .writer.commit import DatasetLock

KEY = "cache_key"  # the metadata entry that holds the key


def cache(
    path: str | os.PathLike,
    build: Callable[[], Any],
    key: Any = None,
    *,
    progress: bool = False,
    **options: Any,
) -> Dataset:
    """Open the dataset at ``path``, first calling ``build()`` and writing it if needed.

    >>> ds = chute.cache("cache/tokens.chute", lambda: tokenize(corpus), key=settings_hash)

    ``build`` returns anything :func:`chute.convert` takes: a dict of arrays, an iterable of
    samples, a torch ``Dataset``, a path to npy/HDF5/Zarr. ``key`` (any JSON value, e.g. a
    hash of the preprocessing settings) is stored in the dataset's metadata; a different
    key rebuilds. ``options`` go to :func:`chute.convert`. The lock file
    ``.NAME.lock`` beside the dataset stays (removing it would race with waiting callers).
    Needs ``fcntl`` (Linux, macOS); on NFS, ``flock`` works across clients on Linux >= 2.6.12.
    """
    path = check_path(path)
    if not callable(build):
        raise SourceError(
            f"chute.cache({str(path)!r}): build must be a function that returns the data, "
            f"got a {type(build).__name__}; wrap it: build=lambda: data"
        )
    try:
        key = json.loads(json.dumps(key, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"cache key must be a JSON value (str, number, list...): {exc}") from None
    ds = _open_if_current(path, key)
    if ds is not None:
        return ds
    path.parent.mkdir(parents=True, exist_ok=True)
    with DatasetLock(path):
        ds = _open_if_current(path, key)  # another process may have built it while we waited
        if ds is not None:
            return ds
        convert(build(), path, overwrite=True, progress=progress, metadata={KEY: key}, **options)
    return open_dataset(path)


def _open_if_current(path: Path, key: Any) -> Dataset | None:
    if not (path / fmt.MANIFEST).is_file():
        return None
    ds = open_dataset(path)
    if ds.metadata.get(KEY) == key:
        return ds
    ds.close()
    return None
