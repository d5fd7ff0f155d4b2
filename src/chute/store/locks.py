"""``flock`` helpers of the remote cache: locks that die with their holder, and pins.

Every descriptor of a lock this process holds is tracked: a forked child closes its copies
(without unlocking: that would unlock the parent's too), so that it never keeps its
parent's locks alive.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cache_folder import CacheFolder

# descriptors of this process's flocks (pins, version locks): a forked child closes its
# copies, so that it does not keep its parent's locks alive (see _close_after_fork)
_fds: set[int] = set()
_fds_lock = threading.Lock()


@functools.cache
def _close_after_fork() -> None:
    def close() -> None:
        for fd in _fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        _fds.clear()

    os.register_at_fork(after_in_child=close)


def lock_fd(folder: CacheFolder, rel: str, flags: int) -> int | None:
    """Open ``rel`` in ``folder`` (created, never through a link) and ``flock`` it; None
    when ``LOCK_NB`` and it is taken."""
    _close_after_fork()
    fd = folder.open(rel, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    with _fds_lock:
        _fds.add(fd)
    return fd


def unlock_fd(fd: int | None) -> None:
    """Close ``fd`` (dropping its flock) if this process still owns it."""
    if fd is None:
        return
    with _fds_lock:
        if fd not in _fds:  # closed after a fork, or already
            return
        _fds.discard(fd)
    os.close(fd)


@contextlib.contextmanager
def locked(folder: CacheFolder, rel: str) -> Iterator[None]:
    fd = lock_fd(folder, rel, fcntl.LOCK_EX)
    try:
        yield
    finally:
        unlock_fd(fd)


class Pin:
    """Files that this process is using: none of them is evicted until :meth:`release`.
    ``paths``: their local paths, in the order asked for."""

    def __init__(self, paths: list[Path], fds: list[int]):
        self.paths = paths
        self._fds = fds
        self._finalizer = weakref.finalize(self, release_all, list(fds))

    def release(self) -> None:
        """Unpin (idempotent); also done when the Pin is garbage-collected."""
        self._finalizer()

    def __enter__(self) -> Pin:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def release_all(fds: list[int]) -> None:
    for fd in fds:
        unlock_fd(fd)
