"""Eviction from a dataset's cache folder (:mod:`chute.store.cache`) under ``cache_limit``.

Before a download, least-recently-used files of this dataset's folder that nobody pins are
evicted until the folder plus the new file fit (the limit is per dataset folder, shared by
every process reading that dataset). A file's last use is the mtime of its ``inuse`` pin
file (or its own); the evictor deletes a file only while it holds that pin file's exclusive
lock, taken without waiting, so a pinned file is never evicted. If pinned files alone exceed
the limit the download proceeds anyway (never a wait, so never a deadlock): the cache
exceeds its limit by at most the pinned files. :meth:`Eviction.check_limit` refuses at open
a limit smaller than the parts that must be in the cache at once.
"""

from __future__ import annotations

import fcntl
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from .. import kinds
from ..errors import CacheError
from .cache_folder import CacheFolder
from .locks import lock_fd, locked, unlock_fd
from .object_store import ObjectStore
from .remote_manifest import Entry

__all__ = ["META", "Eviction"]

META = ".chute-cache"  # the cache folder's bookkeeping sub-folder


class Eviction(ABC):
    """The eviction half of :class:`~chute.store.cache.RemoteCache`: its files (``entries``
    in the folder ``fs``), under ``limit`` bytes and the cache root's ``budget``."""

    store: ObjectStore
    folder: Path
    fs: CacheFolder
    entries: dict[str, Entry]
    limit: int | None
    budget: int | None

    @abstractmethod
    def part_files(self, part: int, fields: Sequence[str] | None = None) -> list[str]:
        """Relative paths of the files of part number ``part`` (of ``fields``, or all)."""

    @abstractmethod
    def _manifest(self) -> kinds.Manifest:
        """The manifest the cache was opened with."""

    def _inuse(self, relpath: str) -> str:
        """The pin file of ``relpath``: held shared while the file is read."""
        return f"{META}/inuse/{relpath}.inuse"

    def usage(self) -> int:
        """Bytes of the data files now in the cache folder."""
        return sum(size for _, size, _ in self._present_files())

    def _present_files(self) -> list[tuple[str, int, float]]:
        """(relpath, bytes, last use) of each manifest file present in the folder."""
        out = []
        for rel in self.entries:
            st = self.fs.stat(rel)
            if st is None:
                continue
            pin = self.fs.stat(self._inuse(rel))
            used = st.st_mtime if pin is None else pin.st_mtime
            out.append((rel, st.st_size, max(used, st.st_mtime)))
        return out

    def evict(self, need: int = 0) -> int:
        """Delete least-recently-used unpinned files of this dataset's folder until ``need``
        more bytes fit under the limit (nothing without a limit); returns the bytes freed."""
        if self.limit is None:
            return 0
        with locked(self.fs, f"{META}/evict.lock"):
            files = self._present_files()
            total = sum(size for _, size, _ in files)
            freed = 0
            for rel, size, _ in sorted(files, key=lambda f: f[2]):
                if total - freed + need <= self.limit:
                    break
                fd = lock_fd(self.fs, self._inuse(rel), fcntl.LOCK_EX | fcntl.LOCK_NB)
                if fd is None:
                    continue  # pinned by some process
                try:
                    self.fs.unlink(rel)
                    freed += size
                finally:
                    unlock_fd(fd)
        return freed

    def check_limit(self, in_flight: int, fields: Sequence[str] | None = None) -> None:
        """Refuse a ``cache_limit`` that cannot hold the ``in_flight`` largest parts (of
        ``fields``) at once: with it, the cache would thrash or exceed the limit."""
        limits = [
            (k, v) for k, v in (("cache_limit", self.limit), ("cache_budget", self.budget)) if v
        ]
        if not limits:
            return
        m = self._manifest()
        sizes = sorted(
            (
                sum(self.entries[r].nbytes for r in self.part_files(i, fields))
                for i in range(len(m.parts))
            ),
            reverse=True,
        )
        need = sum(sizes[: max(1, in_flight)])
        for name, limit in limits:
            if need > limit:
                raise CacheError(
                    f"{name} of {limit} bytes for {self.store.url} is smaller than the "
                    f"{min(in_flight, len(sizes))} largest parts that must be in the cache at "
                    f"once ({need} bytes, in {self.folder}): raise {name} to at least {need} "
                    "bytes, or prefetch fewer parts ahead"
                )
