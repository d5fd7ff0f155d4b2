"""Changing a dataset while other processes read or write it: the writers' lock, the swap.

:class:`DatasetLock`: everything that changes the dataset at ``PATH`` serialises on an
exclusive ``flock`` of the file ``.NAME.lock`` beside it. An appending ``Writer`` holds it from
its start (before it reads the manifest it adds to) until it commits or aborts, so a second
appender waits and then adds to what the first committed; every other writer holds it while it
moves its dataset into place; ``chute.cache`` holds it while it builds. The kernel drops an
``flock`` when its holder's file descriptor closes, including when the process dies (SIGKILL,
the OOM killer, preemption), so a crashed writer never leaves a stale lock that hangs a job.
The lock file stays: removing it would race with waiting callers. Needs ``fcntl`` (Linux,
macOS); on NFS, ``flock`` works across clients on Linux >= 2.6.12.

:func:`exchange`: on Linux, ``renameat2(RENAME_EXCHANGE)`` swaps the new dataset's folder with
the old one in one step, so a reader opening ``PATH`` meanwhile always finds a whole dataset
there, the old or the new. Elsewhere, or on a filesystem that refuses it (NFS), the writer
falls back to two renames (old away, new in), and for a moment ``PATH`` does not exist.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import threading
from pathlib import Path
from typing import Any

from .errors import DatasetNotFoundError, NotWritableError

# (thread, lock file) -> descriptor, for every lock this process holds: for re-entry in a
# thread, and for forked children, which must not keep a lock alive (see _drop_after_fork).
_held: dict[tuple[threading.Thread, str], int] = {}


def _drop_all() -> None:
    for fd in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


@functools.cache
def _drop_after_fork() -> None:
    """Once a lock is used: a forked child (a DataLoader worker forked while a ``Writer``
    appends) closes its copies of the locks' descriptors. It does not hold them, and a copy
    would keep the ``flock`` alive after the holder releases it: the next writer, even the
    holder itself, would wait for the child to exit."""
    os.register_at_fork(after_in_child=_drop_all)


class DatasetLock:
    """An exclusive ``flock`` on ``.NAME.lock`` beside the dataset at ``path``; waits for the
    holder. Re-entrant within one thread (``chute.cache`` holds it while the writer of its
    build commits); other threads and processes wait.

    >>> with DatasetLock(path):
    ...     ...  # no other chute writer changes ``path`` here
    """

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        self.file = str(path.parent / f".{path.name}.lock")
        self._key = (threading.current_thread(), self.file)
        self._fd: int | None = None  # None while not held, or held by an outer re-entry
        self._pid = os.getpid()

    def acquire(self) -> DatasetLock:
        import fcntl

        _drop_after_fork()
        self._key, self._pid = (threading.current_thread(), self.file), os.getpid()
        if self._key in _held:
            return self  # this thread holds it already: the outer holder releases it
        try:
            fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            raise DatasetNotFoundError(f"{Path(self.file).parent}: no such folder") from None
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise NotWritableError(
                f"cannot lock {self.file} to write the dataset beside it: {exc.strerror}; "
                f"the folder {Path(self.file).parent} is read-only or not yours"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = _held[self._key] = fd
        return self

    def release(self) -> None:
        """Release the lock (closing the descriptor drops the ``flock``); idempotent. In a
        forked child, which never held it, this does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            del _held[self._key]
            os.close(fd)

    def __enter__(self) -> DatasetLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2``, or None (not Linux, or a libc older than glibc 2.28)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` atomically. False, with nothing changed, where the OS
    or the filesystem cannot (the caller then renames); other errors raise ``OSError``."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))
