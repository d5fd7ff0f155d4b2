"""Datasets in object storage: ``chute.open("s3://bucket/train.chute")`` -> :class:`RemoteDataset`.

A :class:`RemoteDataset` is a :class:`~chute.Dataset` whose folder is its node-local cache
(:class:`~chute.store.RemoteCache`, itself a chute layout): opening fetches the manifest only
(one GET); a part's files are downloaded (whole, checked against the manifest's size and
xxh3, put in place atomically, once per node) when the part is first read, by
:class:`RemoteFiles`, which pins them in the cache while it maps them. The identity of a
cached file is the manifest's size (its content was checked when it was downloaded), not its
inode: a file evicted and fetched again is the same file.

Prefetch: :meth:`RemoteDataset.prefetch` takes the coming batches (the loader's plan) and
downloads their parts ahead, in order (:class:`~chute.store.parts.PartFeed`); the
:class:`~chute.Loader` calls it when a pass starts.

``cache_limit``: a process pins at most ``PREFETCH_AHEAD`` parts for prefetch and ``KEEP``
mapped parts (the least recently mapped one is unmapped and unpinned); ``open`` refuses a
limit smaller than that many of the largest parts. Without a limit nothing is evicted and
maps are kept, as for a local dataset.

Processes: the dataset pickles as its cache (URL, storage options, cache folder and limit,
the manifest it opened): a worker process makes its own storage client on first use and
fetches nothing at unpickling. The client (obstore) does not survive ``fork()`` once used:
:func:`chute.dataloader` starts the workers of a remote dataset with ``forkserver`` and
refuses ``"fork"`` at once (:func:`refuse_fork`). A process forked anyway (a plain torch
DataLoader) ignores the prefetch feed it inherited (its threads stay in the parent, it would
wait on them forever): it reads parts already in the node's cache, and a download there
raises the client's :class:`~chute.errors.RemoteError` about ``fork()``.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import kinds
from .._arrays import distinct
from ..batch import Pad
from ..errors import ArgumentValueError
from ..store.cache import RemoteCache
from ..store.client import Store
from ..store.object_store import ObjectStore
from ..store.parts import HeldParts, PartFeed
from .dataset import Batch, Dataset
from .files import Files, Part, check

PREFETCH_AHEAD = 2  # parts downloaded ahead of the reader (per loader pass)
KEEP = 3  # mapped parts a process keeps pinned under a cache_limit: a batch of the
# part-aware shuffle (a sliding window of 2 parts) reads up to 3


class RemoteFiles(Files):
    """The files of a remote dataset's cache folder: each part downloaded and pinned before it
    is mapped (see the module docstring). Nothing is stat'ed at open."""

    def __init__(self, cache: RemoteCache, in_memory: bool, keep: int | None):
        super().__init__(cache.folder, in_memory, None)
        self.cache = cache
        self._index: dict[str, int] = {}  # part name -> part number
        self._relpaths: list[list[str]] = []  # per part: its files of the selected fields
        self._sizes: dict[str, int] = {}
        self.columns: dict[tuple[int, str], Any] | None = None  # the dataset's maps
        self.readers: dict[int, Any] | None = None  # and what its ds[i] reads, per part
        self.held = HeldParts(None if in_memory else keep, self._forget)
        self._lock = threading.Lock()

    def check_part(self, part: Part, schema: Mapping[str, kinds.Field]) -> None:
        """Record the part's files (their sizes come from the manifest; the cache checks
        size and checksum of each download)."""
        rel = []
        for name, f in schema.items():
            for fn in f.files(name).values():
                file = part.folder / fn
                self._sizes[str(file)] = part.files[fn].nbytes
                rel.append(os.path.relpath(file, self.path))
        self._index[part.name] = len(self._relpaths)
        self._relpaths.append(rel)

    def same_file(self, file: Path, st: os.stat_result) -> bool:
        return st.st_size == self._sizes.get(str(file))

    def recheck(self, part: Part, name: str) -> None:
        """Nothing to recheck: a cached file is replaced only by the same bytes (an evicted
        part downloaded again, size and checksum checked against the manifest), under a new
        inode, while the maps already made keep reading the old, identical copy. What the
        local recheck guards against, a dataset rewritten in place, cannot happen here."""

    def pin(self, part: int) -> Any:
        """Download (once per node) and pin the selected files of part number ``part``."""
        return self.cache.pin(self._relpaths[part])

    def column(self, part: Part, name: str, f: kinds.Field) -> dict[str, np.ndarray]:
        i = self._index[part.name]
        pin = self.pin(i)
        try:
            col = super().column(part, name, f)
        except BaseException:
            pin.release()
            raise
        self.held.hold(i, pin)
        return col

    def _forget(self, part: int) -> None:
        """Drop the dataset's maps of ``part`` (its pin is released next)."""
        columns = self.columns
        if columns is not None:
            for key in [k for k in list(columns) if k[0] == part]:
                columns.pop(key, None)
        if self.readers is not None:
            self.readers.pop(part, None)


class RemoteDataset(Dataset):
    """A chute dataset in object storage, read through a node-local cache. Create with
    :func:`chute.open` on a URL; the API is :class:`~chute.Dataset`'s. ``url``: its URL;
    ``cache``: its :class:`~chute.store.RemoteCache` (``cache.folder``: the local copy)."""

    def __init__(
        self,
        url: str | ObjectStore,
        fields: Sequence[str] | None = None,
        *,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        cache_budget: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        verify_cache: bool = False,
        retry: float | None = None,
        timeout: float | None = None,
    ):
        # a store: a Store's retries, backoff and timeout, or any ObjectStore (chute.open
        # passes a URL, and retry / timeout when given)
        if isinstance(url, ObjectStore):
            store = url
        else:
            given = (("retry", retry), ("timeout", timeout))
            knobs: dict[str, Any] = {k: v for k, v in given if v is not None}
            store = Store(url, storage_options, **knobs)
        cache = RemoteCache(
            store, cache_dir, cache_limit, verify=verify_cache, cache_budget=cache_budget
        )
        cache.open()
        self._init(cache, None if fields is None else list(fields), False)

    def _init(self, cache: RemoteCache, fields: list[str] | None, in_memory: bool) -> None:
        assert cache.manifest is not None
        self.cache = cache
        self.url = cache.store.url.url
        self._fields_arg = fields
        self._feed: PartFeed | None = None
        self._feed_pid = os.getpid()  # the process whose threads run the feed
        files = RemoteFiles(cache, in_memory, None if cache.limit is None else KEEP)
        snap = check(cache.folder, cache.manifest, fields, in_memory, None, files)
        cache.check_limit(PREFETCH_AHEAD + KEEP, list(snap.schema))
        self._set(cache.folder, snap)
        files.columns, files.readers = self._columns, self._readers
        self._remote_files = files

    # ----------------------------------------------------------------- prefetch

    def parts_of(self, indices: np.ndarray) -> np.ndarray:
        """The sorted part numbers that sample ``indices`` (in range) fall in."""
        return distinct(np.searchsorted(self._ends, indices, side="right"))

    def prefetch(self, batches: Iterable[np.ndarray]) -> PartFeed | None:
        """Download the parts of ``batches`` (index arrays, in the order they will be read)
        ahead of the reads, in order: the loaders call this when a pass starts, and close
        the returned feed when it ends. One feed at a time (a new one closes the last). None
        when this process has every part mapped and no ``cache_limit`` (a warm epoch)."""
        old = self._own_feed()
        self._feed = None
        if old is not None:
            old.close()
        if self.cache.limit is None and len(self._columns) == len(self._parts) * len(self.schema):
            return None  # every part is mapped, and kept mapped: nothing left to fetch
        feed = PartFeed(batches, self.parts_of, self._remote_files.pin, ahead=PREFETCH_AHEAD)
        self._feed, self._feed_pid = feed, os.getpid()
        return feed

    def _own_feed(self) -> PartFeed | None:
        """This process's feed; a feed inherited through ``fork()`` is dropped unused (its
        threads run in the parent: waiting on it, or closing it, would never return)."""
        if self._feed is not None and self._feed_pid != os.getpid():
            self._feed = None
        return self._feed

    def fetch(self) -> None:
        """Download every file of the selected fields into the cache now (checked)."""
        for i in range(len(self._parts)):
            self._remote_files.pin(i).release()

    def gather(
        self,
        indices: Any,
        out: Mapping[str, torch.Tensor] | None = None,
        pad: Pad | None = None,
    ) -> Batch:
        feed = self._own_feed()
        if (
            feed is not None
            and not feed.closed
            and isinstance(indices, np.ndarray)
            and indices.dtype.kind in "iu"
            and len(indices)
            and indices.min() >= 0
            and indices.max() < len(self)
        ):
            feed.at(indices)
        return super().gather(indices, out, pad)

    # --------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Drop the maps and this process's pins (the cached files stay for later reads)."""
        super().close()
        feed = self._own_feed()
        if feed is not None:
            feed.close()
            self._feed = None
        self._remote_files.held.release_all()

    def __getstate__(self) -> dict[str, Any]:
        # The cache: URL, storage options, folder, limit and the manifest it opened; no
        # client, no lock, no pin (each process takes its own).
        return {
            "cache": self.cache,
            "fields": self._fields_arg,
            "in_memory": self._files.in_memory,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._init(state["cache"], state["fields"], state["in_memory"])

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {v}" for k, v in self.schema.items())
        return f"chute.Dataset({self.url!r}, {len(self)} samples, {{{fields}}})"


def warn_thrash(ds: Any, shuffle: bool | str) -> None:
    """Warn when a global shuffle (``shuffle=True``) reads a remote ``ds`` (or the dataset
    under a Subset) whose ``cache_limit`` cannot hold its selected fields: every batch
    touches nearly every part, so the cache evicts and downloads parts again and again (the
    dataset many times over per epoch). ``shuffle="parts"`` reads each part once per epoch."""
    remote = getattr(ds, "dataset", ds)
    if not shuffle or shuffle == "parts" or not isinstance(remote, RemoteDataset):
        return
    bounds = [v for v in (remote.cache.limit, remote.cache.budget) if v is not None]
    if not bounds:
        return
    limit = min(bounds)
    fields = list(remote.schema)
    total = sum(
        remote.cache.entries[rel].nbytes
        for i in range(len(remote.parts))
        for rel in remote.cache.part_files(i, fields)
    )
    if total > limit:
        warnings.warn(
            f"{remote.url}: shuffle=True over a cache limit of {limit} bytes, smaller than "
            f"the dataset's {total} bytes: a global shuffle reads nearly every part in every "
            "batch, so the cache downloads the dataset again and again (many times per "
            "epoch). Use shuffle='parts' (each part read once per epoch), or raise "
            "cache_limit above the dataset's size",
            stacklevel=4,
        )


def refuse_fork(ds: Any, context: Any) -> None:
    """Raise at once when worker processes of a remote ``ds`` would be forked
    (``multiprocessing_context`` ``"fork"`` or a fork context): the parent has used the
    storage client (opening fetched the manifest), and a forked child's requests hang."""
    if context is None or not needs_spawn(ds):
        return
    method = context if isinstance(context, str) else context.get_start_method()
    if method == "fork":
        raise ArgumentValueError(
            f"{getattr(ds, 'dataset', ds).url}: the workers of a dataset in object storage "
            "cannot be forked (its storage client, obstore, does not survive fork(): their "
            "downloads would hang). Leave multiprocessing_context unset (forkserver) or pass "
            "'spawn'; a script then needs the `if __name__ == \"__main__\":` guard"
        )


def needs_spawn(ds: Any) -> bool:
    """Whether worker processes for ``ds`` (or the dataset under a Subset) must not be forked:
    a remote dataset's storage client does not survive ``fork()``."""
    return isinstance(getattr(ds, "dataset", ds), RemoteDataset)
