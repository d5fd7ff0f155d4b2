"""One byte budget for a whole cache folder: every dataset cached in it, every process and job
on the node that reads them.

``cache_limit`` bounds one dataset's folder; a node running several jobs wants one bound for
the disk they share. With ``cache_budget`` (``chute.open(url, cache_budget="200GB")``, or
``$CHUTE_CACHE_BUDGET`` for every job of a node), each download first makes room in the
whole cache folder: the files of all its datasets plus the downloads in flight plus the new
file must fit, or least-recently-used files that no process pins are deleted, whichever
dataset they belong to. A pinned file (a part a reader maps) is never deleted, so the budget
is exceeded by at most the pinned files (never a wait, so never a deadlock).

Bookkeeping, in ``CACHE_DIR/.chute-budget/``:

- ``lock``: making room and reserving happen under an exclusive ``flock`` of it, so two
  downloaders never both count the same free space.
- ``reserved/PID-RANDOM``: a download in flight reserves its size (the file holds the byte
  count) and holds an exclusive ``flock`` of it until the download is in place or failed
  (made and deleted under ``lock``, so whoever counts the reservations sees whole ones). A
  reservation whose lock is free belongs to a dead process (the kernel dropped its lock) and
  is deleted by the next one making room.

Every name under the cache folder is written by whoever shares it, so a record is trusted no
further than it can be checked: a reservation that is not a regular file (a folder, a link)
is never opened and counts nothing; one that is not a byte count of at most the budget (no
download of a file larger than the budget is ever reserved: ``check_limit`` refuses such a
budget at open) counts nothing either, and is deleted when no live process holds its lock
(one that is held may be another job's, with a budget of its own: it is left alone). A
folder at ``lock`` is a :class:`~chute.errors.CacheError` naming it (see
:class:`~chute.store.cache_folder.CacheFolder`).

Every file operation goes through :class:`~chute.store.cache_folder.CacheFolder` (relative to
the cache folder, never through a link); a dataset folder is one with
``.chute-cache/identity.json`` (see :mod:`chute.store.cache`), and its data files are every
regular file in it but ``chute.json`` and hidden names (bookkeeping, temporary downloads).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from .._args import parse_size
from ..errors import CacheError
from .cache_folder import CacheFolder
from .locks import lock_fd, locked, unlock_fd

BUDGET = ".chute-budget"
LOCK = f"{BUDGET}/lock"
RESERVED = f"{BUDGET}/reserved"
MAX_RECORD = 32  # a reservation holds one decimal byte count
_TRY_EX = fcntl.LOCK_EX | fcntl.LOCK_NB  # taken at once or not at all: never wait on a pin


def cache_budget(value: int | str | None) -> int | None:
    """The budget in bytes: ``value``, else ``$CHUTE_CACHE_BUDGET``, else None (no budget)."""
    if value is None:
        value = os.environ.get("CHUTE_CACHE_BUDGET") or None
        if value is None:
            return None
        return parse_size(value, "CHUTE_CACHE_BUDGET")
    return parse_size(value, "cache_budget")


class Budget:
    """The budget of ``limit`` bytes for the cache folder ``root`` (see the module docstring)."""

    def __init__(self, root: Path, limit: int):
        self.fs = CacheFolder(root)
        self.limit = limit

    @contextlib.contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        """Room made for ``nbytes`` more in the whole cache folder, held for them while the
        block runs (a download)."""
        rel = f"{RESERVED}/{os.getpid()}-{secrets.token_hex(6)}"
        with locked(self.fs, LOCK):  # nobody reads the reservation before it is written
            self.make_room(nbytes)
            held = lock_fd(self.fs, rel, fcntl.LOCK_EX)
            assert held is not None
            os.write(held, str(nbytes).encode())
        try:
            yield
        finally:
            with locked(self.fs, LOCK):  # as it was made: never under a reader's eyes
                self.fs.unlink(rel)
                unlock_fd(held)

    def make_room(self, need: int) -> int:
        """Delete least-recently-used unpinned data files of any dataset in the folder until
        ``need`` more bytes fit; returns the bytes freed. Called under the budget's lock."""
        files = list(self._data_files())
        total = sum(size for _, _, size, _ in files) + self._reserved()
        freed = 0
        for folder, rel, size, _ in sorted(files, key=lambda f: f[3]):
            if total - freed + need <= self.limit:
                break
            fd = lock_fd(self.fs, f"{folder}/.chute-cache/inuse/{rel}.inuse", _TRY_EX)
            if fd is None:
                continue  # pinned by some process
            try:
                self.fs.unlink(f"{folder}/{rel}")
                freed += size
            finally:
                unlock_fd(fd)
        return freed

    def usage(self) -> int:
        """Bytes of the data files of every dataset in the folder, and of downloads in flight."""
        return sum(size for _, _, size, _ in self._data_files()) + self._reserved()

    def _data_files(self) -> Iterator[tuple[str, str, int, float]]:
        """(dataset folder, relative path, bytes, last use) of every cached data file."""
        for name in sorted(self.fs.listdir("")):
            if name.startswith(".") or not self._is_dataset(name):
                continue
            for rel, st in self.fs.files(name):
                rel = rel.partition("/")[2]
                if rel == "chute.json":
                    continue
                pin = self.fs.stat(f"{name}/.chute-cache/inuse/{rel}.inuse")
                used = st.st_mtime if pin is None else max(pin.st_mtime, st.st_mtime)
                yield name, rel, st.st_size, used

    def _is_dataset(self, name: str) -> bool:
        """Whether ``name`` is a dataset's cache folder (a real folder: a link is not)."""
        try:
            return self.fs.stat(f"{name}/.chute-cache/identity.json") is not None
        except (CacheError, NotADirectoryError):
            return False

    def _reserved(self) -> int:
        """Bytes reserved by downloads in flight; reservations of dead processes deleted,
        records that are no reservation ignored (see the module docstring)."""
        total = 0
        for name in self.fs.listdir(RESERVED):
            rel = f"{RESERVED}/{name}"
            try:
                if self.fs.stat(rel) is None:
                    continue  # deleted meanwhile
            except CacheError:
                continue  # a folder or a link: no download made it, nothing to open
            fd = lock_fd(self.fs, rel, _TRY_EX)
            if fd is not None:  # nobody holds it: its process died
                self.fs.unlink(rel)
                unlock_fd(fd)
                continue
            total += self._bytes_of(rel)
        return total

    def _bytes_of(self, rel: str) -> int:
        """The byte count of the held reservation ``rel``; 0 for one that is no count of at
        most the budget (a crafted or damaged record)."""
        try:
            data = self.fs.read(rel, MAX_RECORD)
        except CacheError:  # over MAX_RECORD bytes, or made a link meanwhile
            return 0
        try:
            nbytes = int((data or b"0").decode("ascii"))
        except ValueError:
            return 0
        return nbytes if 0 <= nbytes <= self.limit else 0
