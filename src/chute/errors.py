"""One exception family. Each class also subclasses the matching builtin, so
``except FileNotFoundError`` keeps working for code that does not know chute."""

from __future__ import annotations


class ChuteError(Exception):
    """Base of every error chute raises on purpose."""


class DatasetNotFoundError(ChuteError, FileNotFoundError):
    """The path is not a (committed) chute dataset, or a source does not exist."""


class DatasetExistsError(ChuteError, FileExistsError):
    """The destination exists and ``overwrite=True`` was not given, or it is something
    ``overwrite=True`` never replaces (a file, a folder with other things in it).
    ``replaceable`` says which: True when ``overwrite=True`` would replace it."""

    replaceable: bool = False


class SchemaError(ChuteError, ValueError):
    """A value does not fit the schema: wrong dtype, shape, kind, or length."""


class FormatError(ChuteError, ValueError):
    """A dataset on disk is malformed: bad manifest, wrong file size, bad .npy header."""


class DatasetChangedError(FormatError):
    """A dataset's files were replaced or modified since ``chute.open()``: open it again."""


class VersionError(FormatError):
    """The manifest declares a format version this chute cannot read."""


class UnsafePathError(FormatError, PermissionError):
    """A manifest names a file outside the dataset folder (``..``, absolute path, symlink)."""


class ChecksumError(FormatError):
    """A data file's content does not match the checksum recorded at write time."""


class WriteError(ChuteError, OSError):
    """Writing a dataset failed in the OS: the disk is full (``ENOSPC``), a quota is reached,
    an I/O error. Also the ``OSError`` it comes from: ``errno`` and ``filename`` are kept; the
    message names the destination and what to do. The writer has removed its temp folder and
    released its lock; an existing dataset at the destination is unchanged."""

    def __str__(self) -> str:
        # Built as WriteError(errno, message, filename): the message says it all, OSError's
        # "[Errno 28] message: 'filename'" would say it twice.
        if self.errno is not None and self.strerror:
            return self.strerror
        return super().__str__()


class NotWritableError(WriteError, PermissionError):
    """The destination's folder cannot be written: a read-only filesystem or no permission."""


class ArgumentError(ChuteError, TypeError):
    """An argument has the wrong type (``ds[1.5]``, ``chute.open(None)``); the message says
    what is expected."""


class ArgumentValueError(ChuteError, ValueError):
    """An argument has the right type but a value that cannot work (``batch_size=0``, a state
    dict from another order, a call on a closed writer); the message says what would."""


class SampleIndexError(ChuteError, IndexError):
    """An index is out of range for the dataset."""


class SourceError(ChuteError, ValueError):
    """A source to convert from cannot be read or mapped to chute fields."""


class RemoteError(ChuteError, OSError):
    """Object storage failed: unreachable after bounded retries, a 4xx/5xx answer, or no
    credentials. The message names the URL and the object."""


class CacheError(ChuteError, OSError):
    """The local cache of a remote dataset cannot be used: disk full, a limit too small for
    the parts in flight, or a folder that holds another dataset."""


class DescriptorLimitError(ChuteError, OSError):
    """The process has no file descriptor left (``EMFILE``, or the system none: ``ENFILE``)
    to open a dataset file; the message names the limit (``ulimit -n``) and how to raise it.
    The dataset itself is fine."""


class MapLimitError(ChuteError, OSError):
    """A dataset file cannot be memory-mapped because the process is out of maps
    (``vm.max_map_count``) or of address space (``ulimit -v``): the message names the limit,
    how to raise it and how to map fewer files. The dataset itself is fine."""


class WorkerError(ChuteError, RuntimeError):
    """A loader worker failed; the message carries the worker's traceback."""


class StaleIteratorError(ChuteError, RuntimeError):
    """A loader's iterator was used after a newer pass took the loader over (a new ``iter()``,
    ``set_epoch`` or ``load_state_dict``): a loader runs one pass at a time."""


class FrameworkError(ChuteError, RuntimeError):
    """A training framework drives a chute loader in a way that would drop, repeat or alter
    samples (see ``chute/loader/samplers.py``); the message says what to do instead."""


class MissingDependencyError(ChuteError, ImportError):
    """An optional dependency is needed; the message says which extra to install."""


def require(module: str, extra: str):
    """Import an optional dependency lazily, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module} is needed for this; install it with: pip install 'chute[{extra}]'"
        ) from exc
