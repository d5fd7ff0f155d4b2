"""A bounded local cache of one remote dataset, shared by every process on a node.

The cache folder (``cache_dir/NAME-HASH``, one per URL) is itself a chute dataset folder:
``chute.json`` and the part files in the local layout, so the local reader maps them. Its
hidden ``.chute-cache/`` sub-folder holds the bookkeeping:

- ``identity.json``: the URL and the xxh3 of the remote manifest this folder caches. A folder
  of another URL is refused (:class:`CacheError`); the same URL with a new manifest (the
  dataset was rewritten in the bucket) is rebuilt: its files are deleted, unless a process
  still has the old version open (it holds a shared ``flock`` on ``version.lock``), then it
  is refused.
- ``locks/REL.lock``: a file is downloaded under an exclusive ``flock`` of its lock file, so
  all processes of a node download it once; the others wait, then find it. The kernel drops
  the lock when its holder dies (SIGKILL, OOM), so a crash never leaves a stale lock.
- ``inuse/REL.inuse``: a reader pins a file by holding a shared ``flock`` on it while it uses
  the file (its mtime is the file's last use, for LRU). The evictor deletes a file only
  while it holds the exclusive lock, taken without waiting: a pinned file is never evicted.

Every path in the folder is opened relative to it, never through a symlink (see
:mod:`chute.store.folder`): a link planted in the cache is an error, never a write elsewhere.
A download goes to a new temporary name beside its destination (``.NAME.tmp-PID-RANDOM``,
``O_EXCL``), is
checked against the manifest's size and xxh3 (refetched once on a mismatch, then a
:class:`ChecksumError`; never used), then put in place with ``os.replace``: a file at its
final name is always complete and checked. Temporary files of a killed process are removed by
the next downloader of the same file (it holds the file's lock, so they are stale). Files are
not fsync'ed: the cache can always be fetched again, and ext4/xfs flush a file replaced by a
rename before the rename itself.

Trust: a file in the cache was checked (size and xxh3) when it was downloaded; each pin checks
again that it is a regular file (no link) of the manifest's size, but not its bytes: a byte
changed in place afterwards (by another user of a shared disk, a faulty disk) is read as is.
``verify=True`` (``chute.open(url, verify_cache=True)``) also checks each file's checksum once
per process (the first pin of that file there; about a second per GB), and a mismatching
cached file is downloaded again; ``chute verify URL`` does the same for every file.

``cache_limit``: before a download, least-recently-used files of this dataset's folder that
nobody pins are evicted (:mod:`chute.store.eviction`).

``cache_budget``: the same, for the whole cache root (every dataset folder in it, and the
downloads in flight), kept by :mod:`chute.store.budget` around each download.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

from .. import format as fmt
from .. import kinds
from .._args import parse_size
from ..errors import (
    ArgumentError,
    CacheError,
    ChecksumError,
    DatasetChangedError,
    DatasetNotFoundError,
    FormatError,
    RemoteError,
)
from ..manifest_file import MAX_MANIFEST_BYTES, file_checksum, write_manifest
from .budget import Budget
from .budget import cache_budget as cache_budget_of
from .cache_folder import CacheFolder
from .client import CorruptObjectError
from .eviction import META, Eviction
from .locks import Pin, lock_fd, locked, release_all, unlock_fd
from .object_store import ObjectStore
from .paths import PayloadHash, default_cache_dir, disk_error, folder_name, mismatch
from .remote_manifest import Entry, parse_remote_manifest

IDENTITY = f"{META}/identity.json"
MAX_RECORD = 1 << 20  # identity.json holds a URL and a hash


class RemoteCache(Eviction):
    """The local cache of the dataset that ``store`` points to.

    ``cache_dir``: the cache root (default :func:`default_cache_dir`); the dataset's folder
    is :attr:`folder` inside it. ``cache_limit``: bytes or ``"20GB"``; None never evicts.
    :meth:`open` fetches the manifest (one GET) and binds the folder to it; then
    :meth:`pin_part` / :meth:`pin` give local paths of checked files, downloading them once
    per node. Picklable: a process that unpickles it re-checks the folder on first use.
    """

    def __init__(
        self,
        store: ObjectStore,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        *,
        folder: str | os.PathLike | None = None,
        verify: bool = False,
        cache_budget: int | str | None = None,
    ):
        self.store = store
        self.root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.folder = Path(folder) if folder is not None else self.root / folder_name(store.url.url)
        self.folder = self.folder.absolute()
        self.fs = CacheFolder(self.folder, private=folder is None)
        self.verify = bool(verify)
        self._verified: set[tuple[str, int, int]] = set()  # (relpath, inode, mtime), here
        self.limit = None if cache_limit is None else parse_size(cache_limit, "cache_limit")
        # the whole cache_dir's budget (chute/store/budget.py); a folder given is no cache
        self.budget = cache_budget_of(cache_budget) if folder is None else None
        self.manifest: kinds.Manifest | None = None
        self.entries: dict[str, Entry] = {}
        self._identity: dict[str, str] | None = None
        # relpath -> (when, error) of this process's last failed download of it: not tried
        # again for the store's retry window (the prefetcher and each reader thread would
        # otherwise spend one each, in turn)
        self._failed: dict[str, tuple[float, RemoteError]] = {}
        self._version_fd: int | None = None
        self._pid = -1

    @property
    def meta(self) -> Path:
        return self.folder / META

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_version_fd"], state["_pid"] = None, -1
        state["_verified"], state["_failed"] = set(), {}
        return state

    # -------------------------------------------------------------------- open

    def open(self) -> kinds.Manifest:
        """Fetch and check the remote manifest, bind the cache folder to it (rebuilding a
        folder left by an older version of the same URL), write ``chute.json`` there."""
        url = self.store.url
        try:
            raw = self.store.get_bytes(fmt.MANIFEST)
        except CorruptObjectError as exc:
            raise FormatError(
                f"{url.join(fmt.MANIFEST)} is not a chute manifest: {exc} (at most "
                f"{MAX_MANIFEST_BYTES:,} bytes); it was not read"
            ) from None
        except DatasetNotFoundError as exc:
            raise DatasetNotFoundError(
                f"{url} is not a chute dataset: {exc} (an unfinished upload has no "
                f"{fmt.MANIFEST}: its manifest is uploaded last)"
            ) from None
        manifest, entries = parse_remote_manifest(raw, url.join(fmt.MANIFEST))
        identity = {"url": url.url, "manifest_xxh3": xxhash.xxh3_64_hexdigest(raw)}
        try:
            with locked(self.fs, f"{META}/folder.lock"):
                self._bind(identity, manifest)
                self._attach(identity)
        except OSError as exc:
            raise disk_error(exc, self.folder, f"preparing the cache of {url}") from None
        self.manifest, self.entries, self._identity = manifest, entries, identity
        return manifest

    def _bind(self, identity: dict[str, str], manifest: kinds.Manifest) -> None:
        old = self._read_identity()
        if old is None and any(name != META for name in self.fs.listdir("")):
            raise CacheError(
                f"{self.folder} holds files but no chute cache record: it is not a cache "
                f"folder; refusing to use it for {identity['url']} (pass another cache_dir)"
            )
        if old is not None and old.get("url") != identity["url"]:
            raise CacheError(
                f"{self.folder} is the cache of {old.get('url')!r}, not {identity['url']}: "
                "two datasets cannot share one cache folder; pass another cache_dir"
            )
        if old != identity:
            if old is not None:
                self._rebuild(old)
            self.fs.write(IDENTITY, json.dumps(identity).encode())
        if not (self.folder / fmt.MANIFEST).is_file() or old != identity:
            write_manifest(
                self.folder, kinds.Manifest(manifest.fields, manifest.parts, manifest.metadata)
            )

    def _read_identity(self) -> dict[str, Any] | None:
        """The folder's ``identity.json`` (None when absent)."""
        raw = self.fs.read(IDENTITY, MAX_RECORD)
        if raw is None:
            return None
        try:
            old = json.loads(raw)
        except ValueError:
            old = None
        if not isinstance(old, dict):
            raise CacheError(
                f"{self.folder / IDENTITY} is not a cache record (a JSON object): the cache "
                "folder is damaged; delete it, or pass another cache_dir"
            )
        return old

    def _rebuild(self, old: dict[str, Any]) -> None:
        """Delete the files of the older version that this folder caches (the remote
        dataset was rewritten); refused while a process still has that version open."""
        fd = lock_fd(self.fs, f"{META}/version.lock", fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fd is None:
            raise CacheError(
                f"{self.folder} caches an older version of {old.get('url')} (the dataset was "
                "rewritten in the bucket) that another process still reads; finish that job "
                "or pass another cache_dir"
            )
        try:
            for p in self.folder.iterdir():
                if p.name == META:
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
            for sub in ("inuse", "locks"):
                shutil.rmtree(self.meta / sub, ignore_errors=True)
        finally:
            unlock_fd(fd)

    def _attach(self, identity: dict[str, str] | None = None) -> None:
        """Hold a shared lock on ``version.lock`` in this process (a rebuild by another
        job waits for nobody and refuses instead), and check the folder still caches the
        version this cache was opened with."""
        if self._pid == os.getpid() and self._version_fd is not None:
            return
        identity = identity or self._identity
        if identity is None:
            raise CacheError(f"{self.folder}: call open() before using the cache")
        self._version_fd = lock_fd(self.fs, f"{META}/version.lock", fcntl.LOCK_SH)
        self._pid = os.getpid()
        if self._read_identity() != identity:
            self.close()
            raise DatasetChangedError(
                f"{self.folder} now caches another version of {identity['url']} (the "
                "dataset was rewritten and another job rebuilt the cache): open it again"
            )

    def close(self) -> None:
        """Drop this process's hold on the folder (pins are released separately)."""
        if self._pid == os.getpid():
            unlock_fd(self._version_fd)
        self._version_fd, self._pid = None, -1

    # ------------------------------------------------------------------ files

    def part_files(self, part: int, fields: Sequence[str] | None = None) -> list[str]:
        """Relative paths of the files of part number ``part`` (of ``fields``, or all)."""
        m = self._manifest()
        info = m.parts[part]
        names = m.fields if fields is None else fields
        files = [fn for n in names for fn in m.fields[n].files(n).values()]
        return [fn if info.name == fmt.ROOT_PART else f"{info.name}/{fn}" for fn in files]

    def pin_part(self, part: int, fields: Sequence[str] | None = None) -> Pin:
        """Pin and ensure every file of part number ``part``: its local, checked files stay
        until the returned :class:`Pin` is released."""
        return self.pin(self.part_files(part, fields))

    def pin(self, relpaths: Sequence[str]) -> Pin:
        """Pin, then download if absent, each file of ``relpaths`` (manifest paths); the
        files of a part are downloaded at once, each on its own thread."""
        self._attach()
        fds: list[int] = []
        try:
            for rel in relpaths:
                fd = lock_fd(self.fs, self._inuse(rel), fcntl.LOCK_SH)
                assert fd is not None
                fds.append(fd)
                os.utime(fd)  # last use, for LRU
            absent = [rel for rel in relpaths if not self._cached(rel)]
            fetched: dict[str, Path] = {}
            if len(absent) > 1:
                with ThreadPoolExecutor(min(len(absent), 8), "chute-fetch") as pool:
                    fetched = dict(zip(absent, pool.map(self.ensure, absent), strict=True))
            paths = [fetched[rel] if rel in fetched else self.ensure(rel) for rel in relpaths]
            if self.verify:
                for rel in relpaths:
                    self._verify_once(rel)
        except BaseException:
            release_all(fds)
            raise
        return Pin(paths, fds)

    def _cached(self, relpath: str) -> bool:
        entry = self.entries.get(relpath)
        return entry is not None and self._present(entry)

    def _present(self, entry: Entry) -> bool:
        """A regular file at its final name is complete and was checked; the size guards
        against an outside edit."""
        st = self.fs.stat(entry.relpath)
        return st is not None and st.st_size == entry.nbytes

    def ensure(self, relpath: str) -> Path:
        """The local path of manifest file ``relpath``, downloaded and checked if absent.
        Unpinned, it may be evicted by the next download: readers use :meth:`pin`."""
        entry = self.entries.get(relpath)
        if entry is None:
            raise ArgumentError(f"{self.store.url}: the manifest lists no file {relpath!r}")
        return self.ensure_file(entry)

    def ensure_file(self, entry: Entry) -> Path:
        """Download ``entry`` once per node into the cache folder, checked (see the module
        docstring); returns its path."""
        dst = self.folder / entry.relpath
        if self._present(entry):
            return dst
        try:
            with locked(self.fs, f"{META}/locks/{entry.relpath}.lock"):
                if self._present(entry):  # another process fetched it meanwhile
                    return dst
                failed = self._failed.get(entry.relpath)
                quiet = getattr(self.store, "retry", 0.0)  # a Store's retry window
                if failed is not None and time.monotonic() - failed[0] < quiet:
                    raise failed[1]  # its retries were just spent: the same error, at once
                reldir = entry.relpath.rpartition("/")[0]
                for name in self.fs.listdir(reldir):  # a dead downloader's temporary files
                    if name.startswith(f".{dst.name}.tmp-"):
                        self.fs.unlink(f"{reldir}/{name}" if reldir else name)
                self.evict(entry.nbytes)
                try:
                    with self._room(entry.nbytes):
                        self._download(entry)
                except RemoteError as exc:
                    self._failed[entry.relpath] = (time.monotonic(), exc)
                    raise
        except RemoteError:
            raise
        except OSError as exc:
            where = self.store.url.join(entry.key)
            raise disk_error(exc, self.folder, f"downloading {where}") from None
        return dst

    def _room(self, nbytes: int) -> contextlib.AbstractContextManager[None]:
        """Room for a download of ``nbytes`` under the cache folder's budget, if any."""
        if self.budget is None:
            return contextlib.nullcontext()
        return Budget(self.root, self.budget).reserve(nbytes)

    def _download(self, entry: Entry) -> None:
        why = ""
        for _ in range(2):  # a mismatch is refetched once
            fd, tmp = self.fs.create_temp(entry.relpath)
            try:
                with open(fd, "wb", closefd=True) as f:
                    written = PayloadHash(f)
                    got = self.store.get_to_file(
                        entry.key,
                        written,
                        size=entry.nbytes if entry.stored is None else entry.stored[0],
                        zstd=entry.stored is not None,
                        out=entry.nbytes,
                    )
                why = mismatch(self.folder / tmp, entry, got, written)
                if not why:
                    self.fs.replace(tmp, entry.relpath)
                    return
            except CorruptObjectError as exc:
                why = str(exc)
            finally:
                self.fs.unlink(tmp)
        raise ChecksumError(
            f"{self.store.url.join(entry.key)}: {why}, in two downloads: the object differs "
            "from the manifest (modified or corrupted after upload); it was not used. Upload "
            "the dataset again"
        )

    def _verify_once(self, relpath: str) -> None:
        """Check the cached file's checksum, once per file (inode) in this process; a
        mismatch is downloaded again (:meth:`refetch`)."""
        st = self.fs.stat(relpath)
        key = (relpath, st.st_ino, st.st_mtime_ns) if st is not None else None
        if key in self._verified:
            return
        if key is None or file_checksum(self.folder / relpath) != self.entries[relpath].checksum:
            self.refetch(relpath)
            st = self.fs.stat(relpath)
            key = (relpath, st.st_ino, st.st_mtime_ns) if st is not None else None
        if key is not None:
            self._verified.add(key)

    def refetch(self, relpath: str) -> Path:
        """Delete the cached copy of ``relpath`` (a bad one) and download it again, checked."""
        entry = self.entries[relpath]
        try:
            with locked(self.fs, f"{META}/locks/{entry.relpath}.lock"):
                self.fs.unlink(entry.relpath)
        except OSError as exc:
            raise disk_error(exc, self.folder, f"refetching {relpath}") from None
        return self.ensure_file(entry)

    def _manifest(self) -> kinds.Manifest:
        if self.manifest is None:
            raise CacheError(f"{self.folder}: call open() before using the cache")
        return self.manifest
