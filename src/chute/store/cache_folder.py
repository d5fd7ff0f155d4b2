"""Every file operation of the remote cache, made relative to the cache folder without ever
following a symbolic link.

The cache folder is a place other processes write into, so a path in it is never trusted to
lead where its name says: each operation opens the folder itself with ``O_NOFOLLOW``, then
each sub-folder with ``openat(..., O_NOFOLLOW | O_DIRECTORY)`` (created ``0700`` when
missing), and acts on the last name relative to that descriptor. A symlink anywhere inside
the folder is a :class:`~chute.errors.CacheError` naming it, never a write elsewhere.
Temporary files get random names and ``O_CREAT | O_EXCL``, so a name planted in advance is
never opened. The cache folder is created ``0700`` and must belong to this user: a folder
owned by another user is refused (a cache is private to its user; users who want to share
downloads each keep their own ``cache_dir``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import CacheError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CacheFolder:
    """The cache folder at ``path`` (created, with its parents, on first use). ``private``:
    folders ``0700`` and files ``0600`` (a cache); else the umask's (``chute download``'s
    staging folder, which becomes a dataset others may read)."""

    def __init__(self, path: Path, private: bool = True):
        self.path = path
        self.dir_mode, self.file_mode = (0o700, 0o600) if private else (0o777, 0o666)

    def _root(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.path, self.dir_mode)
        try:
            fd = os.open(self.path, _DIR)
        except OSError as exc:
            raise self._refused(self.path, exc) from None
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            os.close(fd)
            raise CacheError(
                f"the cache folder {self.path} belongs to user id {st.st_uid}, not to this "
                f"user ({os.geteuid()}): a cache is private to its user (another user could "
                "change what this one reads); pass a cache_dir of your own"
            )
        return fd

    def _refused(self, path: Path, exc: OSError) -> OSError:
        if exc.errno == errno.EISDIR:
            return CacheError(
                f"{path} in the cache is a folder where the cache keeps a file (a lock or a "
                "record): remove it (it holds no cached data), or pass another cache_dir"
            )
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return CacheError(
                f"{path} in the cache is a symlink or not a folder: the cache never follows "
                "links (a link would send downloads elsewhere); remove it, or pass another "
                "cache_dir"
            )
        return exc

    @contextlib.contextmanager
    def opendir(self, reldir: str, create: bool = True) -> Iterator[int]:
        """A descriptor of sub-folder ``reldir`` ('' for the folder), each component opened
        without following links (created when ``create``)."""
        fd = self._root()
        try:
            for name in filter(None, reldir.split("/")):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, self.dir_mode, dir_fd=fd)
                try:
                    sub = os.open(name, _DIR, dir_fd=fd)
                except OSError as exc:
                    raise self._refused(self.path / reldir, exc) from None
                os.close(fd)
                fd = sub
            yield fd
        finally:
            os.close(fd)

    def open(self, rel: str, flags: int) -> int:
        """``os.open`` of file ``rel`` (its folder created), never through a link."""
        reldir, _, name = rel.rpartition("/")
        with self.opendir(reldir) as dfd:
            try:
                flags |= os.O_NOFOLLOW | os.O_CLOEXEC
                return os.open(name, flags, self.file_mode, dir_fd=dfd)
            except OSError as exc:
                raise self._refused(self.path / rel, exc) from None

    def create_temp(self, rel: str) -> tuple[int, str]:
        """A new file beside ``rel`` (``.NAME.tmp-PID-RANDOM``, ``O_EXCL``), open for
        writing: (descriptor, its relative path)."""
        reldir, _, name = rel.rpartition("/")
        tmp = f"{reldir}/" * bool(reldir) + f".{name}.tmp-{os.getpid()}-{secrets.token_hex(6)}"
        return self.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL), tmp

    def replace(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (same folder), replacing ``dst`` itself even if a link."""
        reldir, _, name = dst.rpartition("/")
        with self.opendir(reldir, create=False) as dfd:
            os.replace(src.rpartition("/")[2], name, src_dir_fd=dfd, dst_dir_fd=dfd)

    def write(self, rel: str, data: bytes) -> None:
        """Put ``data`` at ``rel`` atomically (a temporary file, then :meth:`replace`)."""
        fd, tmp = self.create_temp(rel)
        try:
            with open(fd, "wb", closefd=True) as f:
                f.write(data)
            self.replace(tmp, rel)
        except BaseException:
            self.unlink(tmp)
            raise

    def unlink(self, rel: str) -> None:
        """Remove file ``rel`` if there (a link is removed, never its target)."""
        reldir, _, name = rel.rpartition("/")
        with contextlib.suppress(FileNotFoundError), self.opendir(reldir, create=False) as dfd:
            os.unlink(name, dir_fd=dfd)

    def stat(self, rel: str) -> os.stat_result | None:
        """``lstat`` of ``rel`` when it is a regular file; None when absent; a
        :class:`CacheError` when it is something else (a link, a folder)."""
        reldir, _, name = rel.rpartition("/")
        try:
            with self.opendir(reldir, create=False) as dfd:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise CacheError(
                f"{self.path / rel} in the cache is not a regular file (a link or a folder): "
                "the cache never follows links; remove it, or pass another cache_dir"
            )
        return st

    def read(self, rel: str, limit: int) -> bytes | None:
        """The bytes of regular file ``rel`` (None when absent), refused over ``limit``."""
        st = self.stat(rel)
        if st is None:
            return None
        if st.st_size > limit:
            raise CacheError(f"{self.path / rel} is over {limit} bytes: not a cache record")
        fd = self.open(rel, os.O_RDONLY)
        with open(fd, "rb", closefd=True) as f:
            return f.read(limit + 1)[:limit]

    def files(self, reldir: str, skip: str = ".") -> Iterator[tuple[str, os.stat_result]]:
        """(relative path, lstat) of every regular file under sub-folder ``reldir``, in its
        real sub-folders (links are neither followed nor listed); names starting with
        ``skip`` are left out, files and folders alike."""
        found = []
        try:
            with self.opendir(reldir, create=False) as dfd:
                for e in os.scandir(dfd):
                    if not e.name.startswith(skip):
                        with contextlib.suppress(FileNotFoundError):
                            found.append((e.name, e.stat(follow_symlinks=False)))
        except (FileNotFoundError, NotADirectoryError, CacheError):
            return  # gone meanwhile, or a link: nothing under it is ours to list
        prefix = f"{reldir}/" if reldir else ""
        for name, st in sorted(found):
            if stat.S_ISDIR(st.st_mode):
                yield from self.files(prefix + name, skip)
            elif stat.S_ISREG(st.st_mode):
                yield prefix + name, st

    def listdir(self, reldir: str) -> list[str]:
        """The names in sub-folder ``reldir`` ([] when it does not exist)."""
        try:
            with self.opendir(reldir, create=False) as dfd:
                return os.listdir(dfd)
        except FileNotFoundError:
            return []
