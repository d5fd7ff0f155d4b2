"""Writing datasets: ``chute.write`` for arrays in memory, ``chute.Writer`` for streams.

Everything is written into a hidden staging folder next to the destination
(``.NAME.tmp-PID-RANDOM``); the manifest is written last and the folder renamed into place
(:func:`chute.writer.commit.commit`, re-exported here with :func:`new_staging_dir` for writers of
parts in parallel), so a crash, an exception or SIGKILL never leaves something at ``path``
that ``open`` accepts.
Writers of one path serialise on its lock (:class:`chute.writer.commit.DatasetLock`), and an
existing dataset is replaced by swapping the folders atomically where the OS can
(:func:`chute.writer.commit.exchange`), so that readers opening it meanwhile find it whole.
Memory stays bounded: each batch goes straight to its files (nothing accumulates), so datasets
much larger than RAM can be written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import format as fmt
from .._args import check_path
from ..errors import ArgumentValueError, SchemaError
from ..manifest import read_manifest
from ..store.upload import Staged
from ..store.url import is_url
from .commit import DatasetLock, commit, commit_append, new_staging_dir
from .field_files import FieldWriter, promote
from .values import Promote, flatten, infer_field, prepare, sample_count

Schema = Mapping[str, fmt.Field]


def infer_schema(sample: Mapping[str, Any]) -> dict[str, fmt.Field]:
    """The schema of one sample: arrays -> Tensor, ``str`` -> String, bytes -> Bytes."""
    if not isinstance(sample, Mapping) or not sample:
        raise SchemaError(
            f"a sample must be a non-empty dict of field -> value, got {type(sample)}"
        )
    return {fmt.check_field_name(k): infer_field(k, v) for k, v in sample.items()}


def _check_schema(schema: Mapping[str, Any]) -> dict[str, fmt.Field]:
    if not isinstance(schema, Mapping) or not schema:
        raise SchemaError(
            "schema must be a non-empty dict of field name -> chute.Tensor/Ragged/..."
        )
    out = {}
    for name, f in schema.items():
        fmt.check_field_name(name)
        if not isinstance(f, (fmt.Tensor, fmt.Ragged, fmt.Bytes, fmt.String)):
            raise SchemaError(f"field {name!r}: {f!r} is not a chute field kind")
        out[name] = f
    return out


# ---------------------------------------------------------------------------- parts


class _Part:
    """The open files of one part folder."""

    def __init__(self, folder: Path, name: str, schema: Schema):
        folder.mkdir(exist_ok=True)
        self.folder, self.name = folder, name
        self.num_samples = 0
        self.fields = {name: FieldWriter(folder, name, f) for name, f in schema.items()}

    def close(self) -> fmt.PartInfo:
        files: dict[str, fmt.FileInfo] = {}
        for col in self.fields.values():
            files.update(col.close())
        return fmt.PartInfo(self.name, self.num_samples, files)

    def abort(self) -> None:
        for col in self.fields.values():
            col.abort()


def write_part(
    folder: str | os.PathLike, schema: Schema, batches: Iterable[Mapping[str, Any]]
) -> fmt.PartInfo:
    """Write one complete part (e.g. from a Dask task) into ``folder``; returns its info."""
    folder = Path(folder)
    if not fmt.PART_NAME.fullmatch(folder.name):
        raise SchemaError(f"part folder {folder} must be named like 'part-00000'")
    schema = _check_schema(schema)
    w = _Part(folder, folder.name, schema)
    try:
        for batch in batches:
            n = sample_count(batch, schema, start=w.num_samples)
            prepared = {
                k: prepare(batch[k], f, k, w.num_samples, auto=False) for k, f in schema.items()
            }
            for k, col in w.fields.items():
                col.write(prepared[k])
            w.num_samples += n
        return w.close()
    except BaseException:
        w.abort()
        raise


# ---------------------------------------------------------------------------- the Writer


class Writer:
    """Stream samples or batches into a new dataset at ``path``, committed atomically on exit.

    >>> with chute.Writer("train.chute") as w:
    ...     for img, label in samples:
    ...         w.append({"image": img, "label": label})

    Without a ``schema`` the first sample defines it, and a field whose later samples change
    shape is turned into a :class:`chute.Ragged` field on the fly. With ``part_size`` the data
    is split into ``part-NNNNN`` folders of at most that many samples. With ``append=True``
    the samples are added to the existing dataset at ``path`` as new parts; its schema is
    kept. An appending writer holds the dataset's lock (:class:`chute.writer.commit.DatasetLock`,
    dropped if the process dies) from its creation to its commit or abort: a second one, in
    any process, waits in its constructor, then adds to what the first committed.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        schema: Mapping[str, fmt.Field] | None = None,
        *,
        overwrite: bool = False,
        metadata: Mapping[str, Any] | None = None,
        part_size: int | None = None,
        append: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ):
        if part_size is not None and (type(part_size) is not int or part_size < 1):  # not bool
            raise ArgumentValueError(f"part_size must be a positive int, got {part_size!r}")
        # A URL (s3://...): written to a local staging folder, uploaded on commit.
        self._remote: Staged | None = None
        if is_url(path):
            if append:
                raise ArgumentValueError(
                    f"append=True to a URL ({path}) is not supported: write the dataset "
                    "locally, append there, then upload it (chute upload LOCAL URL)"
                )
            self._remote = Staged(str(path), overwrite=overwrite, storage_options=storage_options)
            path = self._remote.local
        # Absolute: the staging folder and the final rename must not follow a later chdir.
        self.path = check_path(path).absolute()
        self.metadata = dict(metadata or {})
        self._base: fmt.Manifest | None = None
        self._first_part = 0
        self._lock: DatasetLock | None = None
        if append and overwrite:
            raise ArgumentValueError("append=True and overwrite=True exclude each other")
        if append:
            self._lock = DatasetLock(self.path).acquire()  # before reading what we add to
        try:
            self._start(schema, overwrite, part_size, append)
        except BaseException:
            self._release()
            if self._remote is not None:
                self._remote.discard()
            raise

    def _start(
        self, schema: Mapping[str, Any] | None, overwrite: bool, part_size: int | None, append: bool
    ) -> None:
        """The rest of ``__init__``, which releases the lock if this raises."""
        if append:
            self._base = read_manifest(self.path)
            if schema is not None and dict(_check_schema(schema)) != dict(self._base.fields):
                raise SchemaError(
                    f"{self.path}: schema {dict(schema)} differs from the dataset's "
                    f"{dict(self._base.fields)}; appended samples must have the same fields"
                )
            schema = dict(self._base.fields)
            self.metadata = {**self._base.metadata, **self.metadata}
            names = [p.name for p in self._base.parts]
            self._first_part = 1 + max(
                (int(n[5:]) for n in names if n != fmt.ROOT_PART), default=0 if names else -1
            )
        self._auto = schema is None
        self._schema = None if schema is None else _check_schema(schema)
        self._overwrite = overwrite
        self._part_size = part_size
        self._staging: Path | None = new_staging_dir(
            self.path / ".append" if append else self.path, overwrite
        )
        self._parts: list[fmt.PartInfo] = []
        self._part: _Part | None = None
        self._count = 0

    @property
    def schema(self) -> dict[str, fmt.Field] | None:
        return None if self._schema is None else dict(self._schema)

    def __len__(self) -> int:
        return self._count

    def _open_part(self) -> _Part:
        if self._staging is None:
            raise ArgumentValueError(f"writer for {self.path} is closed")
        if self._part is None:
            assert self._schema is not None
            if self._part_size is None and self._base is None:
                self._part = _Part(self._staging, fmt.ROOT_PART, self._schema)
            else:
                name = f"part-{self._first_part + len(self._parts):05d}"
                self._part = _Part(self._staging / name, name, self._schema)
        return self._part

    def append(self, sample: Mapping[str, Any]) -> None:
        """Add one sample: a dict field -> array / tensor / scalar / str / bytes (nested dicts
        give ``group/name`` fields)."""
        sample = flatten(sample)
        if self._schema is None:
            self._schema = infer_schema(sample)
        self._write({k: [v] for k, v in sample.items()} if isinstance(sample, Mapping) else sample)

    def extend(self, batch: Mapping[str, Any]) -> None:
        """Add a batch: per field, an array with a leading batch axis or a list of samples."""
        batch = flatten(batch)
        if self._schema is None:
            if not isinstance(batch, Mapping) or not batch:
                raise SchemaError("extend() takes a non-empty dict of field -> batch")
            if sample_count(batch, batch, start=self._count) == 0:
                return  # nothing to infer the schema from yet (lengths are checked first)
            self._schema = infer_schema({k: v[0] for k, v in batch.items()})
        self._write(batch)

    def _write(self, batch: Mapping[str, Any]) -> None:
        assert self._schema is not None
        n = sample_count(batch, self._schema, start=self._count)
        done = 0
        while done < n:
            part = self._open_part()
            room = n - done if self._part_size is None else self._part_size - part.num_samples
            take = min(room, n - done)
            prepared = {}
            for name in self._schema:
                chunk = batch[name] if take == n else batch[name][done : done + take]
                while name not in prepared:
                    try:
                        f = self._schema[name]
                        prepared[name] = prepare(chunk, f, name, self._count, self._auto)
                    except Promote as p:  # the field becomes ragged: rewrite what was written
                        self._promote(name, p.field)
            for name, col in part.fields.items():
                col.write(prepared[name])
            part.num_samples += take
            self._count += take
            done += take
            if self._part_size is not None and part.num_samples == self._part_size:
                self._parts.append(part.close())
                self._part = None

    def _promote(self, name: str, new: fmt.Field) -> None:
        assert self._schema is not None and self._staging is not None
        old = self._schema[name]
        for i, info in enumerate(self._parts):
            col = promote(self._staging / info.name, name, old, new, None, info.num_samples)
            stale = set(fmt.field_files(name, old).values())
            files = {k: v for k, v in info.files.items() if k not in stale}
            self._parts[i] = fmt.PartInfo(info.name, info.num_samples, {**files, **col.close()})
        if self._part is not None:
            part = self._part
            part.fields[name] = promote(
                part.folder, name, old, new, part.fields[name], part.num_samples
            )
        self._schema[name] = new

    def commit(self) -> Path | str:
        """Finish writing and move the dataset into place (for a URL: upload it, the
        manifest last; returns the URL)."""
        if self._staging is None:
            raise ArgumentValueError(f"writer for {self.path} is already closed")
        if self._schema is None:
            raise SchemaError(
                f"nothing was written to {self.path} and no schema was given; "
                "pass schema= to write an empty dataset"
            )
        if self._part is not None or not self._parts:
            self._parts.append(self._open_part().close())
            self._part = None
        staging, self._staging = self._staging, None
        if self._base is not None:
            new = fmt.Manifest(self._schema, tuple(self._parts), self.metadata)
            try:
                return commit_append(staging, self.path, self._base, new)
            finally:
                self._release()
        done = commit(staging, self.path, self._schema, self._parts, self.metadata, self._overwrite)
        if self._remote is not None:  # parts, then the manifest; the local copy is removed
            remote, self._remote = self._remote, None
            return remote.upload()
        return done

    def abort(self) -> None:
        """Discard everything written; nothing is left at ``path``."""
        if self._part is not None:
            self._part.abort()
            self._part = None
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if getattr(self, "_remote", None) is not None:
            self._remote.discard()  # type: ignore[union-attr]
            self._remote = None
        self._release()

    def _release(self) -> None:
        """Let the next appender of ``path`` in (an appending writer holds its lock)."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.commit()
            except BaseException:
                self.abort()  # what is left of the staging folder, and the appenders' lock
                raise
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_staging", None) is not None:
            self.abort()


def write(
    path: str | os.PathLike,
    arrays: Mapping[str, Any],
    *,
    schema: Mapping[str, fmt.Field] | None = None,
    overwrite: bool = False,
    metadata: Mapping[str, Any] | None = None,
    part_size: int | None = None,
    chunk_bytes: int = 64 << 20,
) -> Path | str:
    """Write a dict of equal-length arrays / tensors / lists as a dataset at ``path``.

    >>> chute.write("cifar.chute", {"image": images, "label": labels})

    Arrays are copied in chunks of about ``chunk_bytes``, so memory-mapped inputs larger than
    RAM work too. Nested dicts give ``group/name`` fields. With ``part_size`` the data is split
    into ``part-NNNNN`` folders of at most that many samples, as with :class:`Writer`.
    """
    path = str(path) if is_url(path) else check_path(path)  # a URL: see Writer
    arrays = flatten(arrays)
    if not isinstance(arrays, Mapping) or not arrays:
        raise SchemaError("write() takes a non-empty dict of field name -> array")
    n = sample_count(arrays, arrays)
    row_bytes = sum(
        64 if isinstance(v, (list, tuple)) else getattr(v, "nbytes", 64) // max(n, 1)
        for v in arrays.values()
    )
    step = max(1, chunk_bytes // max(row_bytes, 1))
    if schema is None and n == 0:
        schema = {k: infer_field(k, v[:0], batch=True) for k, v in arrays.items()}  # bf16 too
    with Writer(path, schema, overwrite=overwrite, metadata=metadata, part_size=part_size) as w:
        for start in range(0, n, step):
            w.extend({k: v[start : start + step] for k, v in arrays.items()})
    return path
