"""One byte budget for a whole cache root, shared by every dataset folder in it and every
process that uses them.

A node runs several jobs, each opening its datasets with the same ``cache_dir`` (say
``$CHUTE_CACHE_DIR`` on the local NVMe): their ``cache_limit`` bounds the root, not each
dataset. Before a download, :func:`evict` takes the root's ledger lock
(``CACHE_DIR/.chute-budget.lock``, an exclusive ``flock`` that dies with its holder), lists the
data files of every dataset folder in the root (a folder with a ``.chute-cache/identity.json``
record, see :mod:`chute.store.cache`), and deletes the least recently used unpinned ones,
across datasets, until the root plus the new file fit the limit. A pinned file (a shared
``flock`` on its ``.chute-cache/inuse/REL.inuse``, held by a reader) is never deleted: the
evictor deletes a file only while it holds that lock exclusively, taken without waiting. So
the root exceeds the limit by at most the files pinned at that moment.

Cost: one ``stat`` per data file in the root and two per candidate, under the lock, per
download that needs room (parts are large, so files are few).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .locks import lock_fd, locked, unlock_fd

LEDGER_LOCK = ".chute-budget.lock"
META = ".chute-cache"  # a dataset folder's bookkeeping (chute/store/cache.py)
_SKIP = ("chute.json",)


def _files(folder: Path) -> list[tuple[Path, Path, int, float]]:
    """(file, its in-use file, bytes, last use) of each data file of dataset folder
    ``folder`` (downloads in progress, named ``.NAME.tmp-...``, are not data files yet)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != META]
        for name in filenames:
            if name.startswith(".") or (dirpath == str(folder) and name in _SKIP):
                continue
            path = Path(dirpath) / name
            inuse = folder / META / "inuse" / (os.path.relpath(path, folder) + ".inuse")
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            try:
                used = max(st.st_mtime, inuse.stat().st_mtime)
            except FileNotFoundError:
                used = st.st_mtime
            out.append((path, inuse, st.st_size, used))
    return out


def usage(root: Path) -> list[tuple[Path, Path, int, float]]:
    """The data files of every dataset folder in cache root ``root``."""
    out = []
    for folder in root.iterdir() if root.is_dir() else ():
        if (folder / META / "identity.json").is_file():
            out += _files(folder)
    return out


def evict(root: Path, limit: int, need: int = 0) -> int:
    """Delete least-recently-used unpinned data files of any dataset in ``root`` until
    ``need`` more bytes fit under ``limit``; returns the bytes freed."""
    with locked(root / LEDGER_LOCK):
        files = usage(root)
        total = sum(f[2] for f in files)
        freed = 0
        for path, inuse, size, _ in sorted(files, key=lambda f: f[3]):
            if total - freed + need <= limit:
                break
            fd = lock_fd(inuse, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is None:
                continue  # pinned by some process
            try:
                path.unlink(missing_ok=True)
                freed += size
            finally:
                unlock_fd(fd)
    return freed
