"""Changing a dataset while other processes read or write it: the writers' lock, the staging
folder, the commit, the swap.

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

:func:`new_staging_dir`, :func:`commit`, :func:`commit_append`: a writer fills the hidden
folder ``.NAME.tmp-PID-RANDOM`` beside ``PATH``; :func:`commit` writes the manifest into it
last (temp file, fsync, ``os.replace``) and moves it into place under the lock, so a crash
never leaves a folder at ``PATH`` that ``open`` accepts. An append moves its new part folders
into the dataset, then replaces the manifest. Folders of writers that died (their PID is gone)
are removed by the next writer of the same path. ``chute.writer.writer`` re-exports
:func:`new_staging_dir` and :func:`commit` beside ``write_part``, for writers of parts in
parallel (``chute.from_dask``).

:func:`writing`: every write path (the writer's files, the staging folder, the lock, the
commit) turns an ``OSError`` into one :class:`~chute.WriteError` (``ENOSPC``, ``EIO``...) or
:class:`~chute.NotWritableError` (permissions, read-only), keeping ``errno`` and ``filename``
and naming the destination and what to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import shutil
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import format as fmt
from .. import kinds
from .._args import check_path
from ..errors import (
    ChuteError,
    DatasetExistsError,
    DatasetNotFoundError,
    NotWritableError,
    WriteError,
)
from ..manifest_file import fsync_dir, read_manifest, write_manifest

# ---------------------------------------------------------------------------- OS errors


def write_error(exc: OSError, path: str | os.PathLike) -> WriteError:
    """The :class:`~chute.WriteError` for ``exc``, raised while writing the dataset at
    ``path``: same ``errno`` and ``filename``, a message that names ``path`` and says what to
    do. Permission and read-only errors give a :class:`~chute.NotWritableError`."""
    where = f" ({exc.filename})" if exc.filename else ""
    what = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        cls: type[WriteError] = NotWritableError
        todo = f"the folder {Path(path).parent} is read-only or not yours: write it elsewhere"
    else:
        cls = WriteError
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            todo = "free space on that filesystem (or raise the quota), or write it elsewhere"
        elif exc.errno == errno.EFBIG:
            todo = "a file outgrew the filesystem's limit: pass part_size=, or write it elsewhere"
        else:
            todo = "check that filesystem, or write the dataset elsewhere"
    message = f"cannot write {path}: {what}{where}; {todo}"
    return cls(exc.errno, message, exc.filename)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Raise an ``OSError`` from the body as the :func:`write_error` for ``path`` (chute's own
    errors pass unchanged)."""
    try:
        yield
    except ChuteError:
        raise
    except OSError as exc:
        raise write_error(exc, path) from None


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
        # one spelling per lock file (absolute, links of the folder resolved): the re-entry
        # check compares it, and ``cache("cache/x.chute")`` and its writer spell it apart
        path = Path(os.path.abspath(path))
        self.file = str(path.parent.resolve() / f".{path.name}.lock")
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
            dataset = Path(self.file).parent / Path(self.file).name[1:].removesuffix(".lock")
            raise write_error(exc, dataset) from None
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
def libc(name: str, *argtypes: Any) -> Any:
    """libc's function ``name`` (taking ``argtypes``, returning an int, errno kept), or None
    where there is none: a call Python's ``os`` lacks (``renameat2``: Linux, glibc >= 2.28;
    ``sync_file_range``: Linux). Looked up on first use, not at import."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` atomically. False, with nothing changed, where the OS
    or the filesystem cannot (the caller then renames); other errors raise ``OSError``."""
    fn = libc(
        "renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint
    )
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


# ---------------------------------------------------------------------------- staging & commit


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(path: Path) -> None:
    """Remove staging/old folders of ``path`` left by writers that died."""
    for stale in path.parent.glob(f".{path.name}.*-*-*"):
        kind, _, rest = stale.name[len(path.name) + 2 :].partition("-")
        pid = rest.split("-", 1)[0]
        if kind in ("tmp", "old") and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _check_destination(path: Path, overwrite: bool) -> None:
    """Refuse anything at ``path`` but a dataset or an empty folder (``overwrite`` never
    replaces those, so it is not offered), and those too unless ``overwrite``."""
    if not (path.exists() or path.is_symlink()):
        return
    if not (path.is_dir() and ((path / fmt.MANIFEST).exists() or not any(path.iterdir()))):
        kind = "a folder that is not a chute dataset" if path.is_dir() else "a file"
        raise DatasetExistsError(
            f"{path} exists and is {kind}, which chute never replaces (overwriting replaces "
            "only a chute dataset or an empty folder): choose another path, or remove it yourself"
        )
    if not overwrite:
        exc = DatasetExistsError(f"{path} already exists; pass overwrite=True to replace it")
        exc.replaceable = True
        raise exc


def new_staging_dir(
    path: str | os.PathLike, overwrite: bool = False, *, append: bool = False
) -> Path:
    """Create the hidden folder a dataset for ``path`` is written into before commit; with
    ``append``, the folder ``..append.tmp-*`` inside the dataset at ``path`` that the new
    parts of an append are written into."""
    path = check_path(path)
    beside = path / ".append" if append else path
    if not append:
        _check_destination(path, overwrite)
    staging = beside.parent / f".{beside.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    with writing(path):
        beside.parent.mkdir(parents=True, exist_ok=True)
        _clean_stale(beside)
        staging.mkdir()
    return staging


def commit(
    staging: str | os.PathLike,
    path: str | os.PathLike,
    schema: Mapping[str, kinds.Field],
    parts: list[kinds.PartInfo],
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the manifest into ``staging`` and move it to ``path`` atomically.

    ``parts`` are folders already written into ``staging`` by :func:`chute.writer.writer.write_part`
    (or the root part ``"."``). On any error the staging folder is removed; an ``OSError`` is
    raised as a :class:`~chute.WriteError`.
    """
    staging, path = Path(staging), Path(path)
    old = None
    try:
        with writing(path):
            write_manifest(
                staging, kinds.Manifest(dict(schema), tuple(parts), dict(metadata or {}))
            )
            with DatasetLock(path):  # no other writer commits or appends to path meanwhile
                _check_destination(path, overwrite)
                old = _move_into_place(staging, path)
                fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


def _move_into_place(staging: Path, path: Path) -> Path | None:
    """Move ``staging`` to ``path``; returns where the previous dataset went (to remove), or
    None. If the move fails, the previous dataset is back at ``path``."""
    if path.exists() and exchange(staging, path):
        return staging  # now holds the previous dataset
    old = None  # no swap here: for a moment nothing is at path
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(path, old)
    try:
        os.rename(staging, path)
    except BaseException:
        if old is not None:
            os.rename(old, path)
        raise
    return old


def commit_append(staging: Path, path: Path, old: kinds.Manifest, new: kinds.Manifest) -> Path:
    """Move the new parts into the dataset, then replace its manifest (the commit point).

    On an error before that point the parts moved in are removed again (on a full disk, that
    gives the space back now); a crash leaves part folders no manifest refers to: readers
    ignore them and the next append removes them. An ``OSError`` is raised as a
    :class:`~chute.WriteError`.
    """
    moved: list[Path] = []
    try:
        with writing(path):
            for stale in path.glob(fmt.MANIFEST + ".tmp-*"):  # a crashed append's manifest
                pid = stale.name.removeprefix(fmt.MANIFEST + ".tmp-").split("-")[0]  # PID-RANDOM
                if pid.isdigit() and not _pid_alive(int(pid)):
                    stale.unlink(missing_ok=True)
            for info in new.parts:
                shutil.rmtree(path / info.name, ignore_errors=True)  # a crashed append's orphan
                os.rename(staging / info.name, path / info.name)
                moved.append(path / info.name)
            fsync_dir(path)
            write_manifest(path, kinds.Manifest(old.fields, old.parts + new.parts, new.metadata))
    except BaseException:
        _drop_uncommitted(path, moved)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def _drop_uncommitted(path: Path, moved: list[Path]) -> None:
    """After a failed append: remove the part folders it moved into ``path`` that the manifest
    there does not list (it failed before its commit point). If the manifest cannot be read,
    they stay for the next append to remove."""
    try:
        listed = {p.name for p in read_manifest(path).parts}
    except Exception:
        return
    for folder in moved:
        if folder.name not in listed:
            shutil.rmtree(folder, ignore_errors=True)
