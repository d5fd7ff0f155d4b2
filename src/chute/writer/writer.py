"""Writing datasets: ``chute.Writer`` for streams (``chute.write``, for arrays in memory, drives
it: :mod:`chute.writer.arrays`), ``write_part`` for writers of parts in parallel.

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
An ``OSError`` while writing (a full disk, an I/O error) is raised as a :class:`~chute.WriteError`
naming the destination (:func:`chute.writer.commit.writing`); the writer is then aborted: its
staging folder removed, its lock released, an existing dataset at ``path`` unchanged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import format as fmt
from .. import kinds
from .._args import check_path
from ..columns.values import Promote
from ..errors import ArgumentValueError, SchemaError, WriteError
from ..manifest_file import read_manifest
from ..store.upload import Staged
from ..store.url import is_url
from .commit import DatasetLock, commit, commit_append, new_staging_dir, writing
from .field_files import PartFiles, promote
from .schema_inference import (
    check_schema,
    decided_field,
    flatten,
    infer_schema,
    is_empty,
    sample_count,
)

URL_PART_BYTES = 128 << 20  # a part's size when a URL is written without part_size: uploaded
# (and its local copy deleted) when finished, so a writer's local disk holds about 2 parts

Schema = Mapping[str, kinds.Field]


# ---------------------------------------------------------------------------- parts


def write_part(
    folder: str | os.PathLike, schema: Schema, batches: Iterable[Mapping[str, Any]]
) -> kinds.PartInfo:
    """Write one complete part (e.g. from a Dask task) into ``folder``; returns its info.
    An ``OSError`` is raised as a :class:`~chute.WriteError` naming ``folder``; the caller
    removes the folder (the staging folder around it)."""
    folder = Path(folder)
    if not fmt.PART_NAME.fullmatch(folder.name):
        raise SchemaError(f"part folder {folder} must be named like 'part-00000'")
    schema = check_schema(schema)
    with writing(folder):
        w = PartFiles(folder, folder.name, schema)
    try:
        for batch in batches:
            n = sample_count(batch, schema, start=w.num_samples)
            prepared = {
                k: f.prepare(batch[k], k, w.num_samples, auto=False) for k, f in schema.items()
            }
            with writing(folder):
                for k, col in w.fields.items():
                    col.write(prepared[k])
            w.num_samples += n
        with writing(folder):
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
    shape is turned into a :class:`chute.Ragged` field on the fly; an empty first list or
    array (``[]``) leaves the dtype to the first non-empty sample (so token ids stay ints).
    A field whose samples may all happen to have one length (documents of a shard) is
    declared ``chute.Ragged(dtype)``: inferred, it would be a fixed-shape Tensor. With
    ``part_size`` the data is split into ``part-NNNNN`` folders of at most that many samples.
    With ``append=True``
    the samples are added to the existing dataset at ``path`` as new parts; its schema is
    kept. An appending writer holds the dataset's lock (:class:`chute.writer.commit.DatasetLock`,
    dropped if the process dies) from its creation to its commit or abort: a second one, in
    any process, waits in its constructor, then adds to what the first committed.

    A URL ``path`` (``s3://...``, ``storage_options`` for its client): each part is uploaded
    as soon as it is finished and its local copy (under ``CACHE_DIR/.staging``) deleted, the
    manifest last; without ``part_size`` a part holds about ``URL_PART_BYTES`` (128 MiB,
    measured on the first samples written). ``compression="zstd"`` stores the files
    compressed in the bucket.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        schema: Mapping[str, kinds.Field] | None = None,
        *,
        overwrite: bool = False,
        metadata: Mapping[str, Any] | None = None,
        part_size: int | None = None,
        append: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        compression: str | None = None,
    ):
        if part_size is not None and (type(part_size) is not int or part_size < 1):  # not bool
            raise ArgumentValueError(f"part_size must be a positive int, got {part_size!r}")
        # A URL (s3://...): each part written to a local staging folder, uploaded when done.
        self._remote: Staged | None = None
        if compression is not None and not is_url(path):
            raise ArgumentValueError(
                f"compression= applies to datasets written to a URL, not to {path}: a local "
                "dataset stays uncompressed (it is memory-mapped)"
            )
        if is_url(path):
            if append:
                raise ArgumentValueError(
                    f"append=True to a URL ({path}) is not supported: write the dataset "
                    "locally, append there, then upload it (chute upload LOCAL URL)"
                )
            self._remote = Staged(
                str(path),
                overwrite=overwrite,
                storage_options=storage_options,
                compression=compression,
            )
            path = self._remote.local
        # Absolute: the staging folder and the final rename must not follow a later chdir.
        self.path = check_path(path).absolute()
        self.metadata = dict(metadata or {})
        self._base: kinds.Manifest | None = None
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
            if schema is not None and dict(check_schema(schema)) != dict(self._base.fields):
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
        self._schema = None if schema is None else check_schema(schema)
        self._undecided: set[str] = set()  # inferred fields whose samples were all empty
        self._overwrite = overwrite
        self._part_size = part_size
        self._sizing = False  # the part size of a URL is being measured
        self._staging: Path | None = new_staging_dir(self.path, overwrite, append=append)
        self._parts: list[kinds.PartInfo] = []
        self._part: PartFiles | None = None
        self._count = 0

    @property
    def schema(self) -> dict[str, kinds.Field] | None:
        return None if self._schema is None else dict(self._schema)

    def __len__(self) -> int:
        return self._count

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Around the writes to the files: an ``OSError`` becomes a :class:`~chute.WriteError`
        naming ``path`` (for a URL: the staging folder, and ``CHUTE_CACHE_DIR`` that places
        it), and aborts the writer (its fields' files are out of step now)."""
        try:
            with writing(self.path):
                yield
        except WriteError as exc:
            remote = self._remote
            self.abort()
            if remote is None:
                raise
            raise type(exc)(
                exc.errno,
                f"{exc.strerror} (this is the local staging of {remote.url}, in "
                f"{self.path.parent.parent}: set CHUTE_CACHE_DIR to a disk with room for about "
                "2 parts, or pass a smaller part_size)",
                exc.filename,
            ) from None

    def _open_part(self) -> PartFiles:
        if self._staging is None:
            raise ArgumentValueError(f"writer for {self.path} is closed")
        if self._part is None:
            assert self._schema is not None
            if self._part_size is None and self._base is None and self._remote is None:
                self._part = PartFiles(self._staging, fmt.ROOT_PART, self._schema)
            else:
                name = f"part-{self._first_part + len(self._parts):05d}"
                self._part = PartFiles(self._staging / name, name, self._schema)
        return self._part

    def append(self, sample: Mapping[str, Any]) -> None:
        """Add one sample: a dict field -> array / tensor / scalar / str / bytes (nested dicts
        give ``group/name`` fields)."""
        sample = flatten(sample)
        if self._schema is None:
            self._schema = infer_schema(sample)
            self._undecided = {k for k, v in sample.items() if is_empty(v)}
        self._write({k: [v] for k, v in sample.items()} if isinstance(sample, Mapping) else sample)

    def extend(self, batch: Mapping[str, Any]) -> None:
        """Add a batch: per field, an array with a leading batch axis or a list of samples."""
        batch = flatten(batch)
        if self._schema is None:
            if not isinstance(batch, Mapping) or not batch:
                raise SchemaError("extend() takes a non-empty dict of field -> batch")
            if sample_count(batch, batch, start=self._count) == 0:
                return  # nothing to infer the schema from yet (lengths are checked first)
            first = {k: v[0] for k, v in batch.items()}
            self._schema = infer_schema(first)
            self._undecided = {k for k, v in first.items() if is_empty(v)}
        self._write(batch)

    def _write(self, batch: Mapping[str, Any]) -> None:
        assert self._schema is not None
        n = sample_count(batch, self._schema, start=self._count)
        if self._part_size is None and self._remote is not None and n:
            # parts of ~URL_PART_BYTES: estimated from this batch, measured once written
            self._part_size = max(1, URL_PART_BYTES // max(1, row_bytes(batch, n)))
            self._sizing = True
        done = 0
        while done < n:
            with self._writing():
                part = self._open_part()
            room = n - done if self._part_size is None else self._part_size - part.num_samples
            take = min(room, n - done)
            prepared = {}
            for name in self._schema:
                chunk = batch[name] if take == n else batch[name][done : done + take]
                if name in self._undecided:  # the first non-empty sample decides the dtype
                    decided = decided_field(self._schema[name], chunk, name, self._count)
                    if decided is not None:
                        self._undecided.discard(name)
                        with self._writing():
                            self._promote(name, decided)
                while name not in prepared:
                    try:
                        f = self._schema[name]
                        prepared[name] = f.prepare(chunk, name, self._count, self._auto)
                    except Promote as p:  # the field becomes ragged: rewrite what was written
                        with self._writing():
                            self._promote(name, kinds.Ragged(p.dtype, p.inner_shape))
            with self._writing():
                for name, col in part.fields.items():
                    col.write(prepared[name])
            part.num_samples += take
            self._count += take
            done += take
            if self._sizing:  # a URL without part_size: measured on the first samples
                per_sample = max(1, part.nbytes() // part.num_samples)
                self._part_size = max(part.num_samples, URL_PART_BYTES // per_sample)
                self._sizing = False
            if self._part_size is not None and part.num_samples == self._part_size:
                self._close_part(part)

    def _close_part(self, part: PartFiles) -> None:
        """Finish ``part``; for a URL upload it now and delete its local files."""
        assert self._staging is not None
        with self._writing():
            info = part.close()
        self._parts.append(info)
        self._part = None
        if self._remote is not None:
            self._remote.send_part(self._staging, info)

    def _promote(self, name: str, new: kinds.Field) -> None:
        assert self._schema is not None and self._staging is not None
        old = self._schema[name]
        for i, info in enumerate(self._parts):
            if self._remote is not None:  # uploaded: download it back, rewrite, send again
                (self._staging / info.name).mkdir(exist_ok=True)
                self._remote.restore_part(self._staging, info)
            col = promote(self._staging / info.name, name, old, new, None, info.num_samples)
            stale = set(old.files(name).values())
            files = {k: v for k, v in info.files.items() if k not in stale}
            self._parts[i] = kinds.PartInfo(info.name, info.num_samples, {**files, **col.close()})
            if self._remote is not None:
                self._remote.send_part(self._staging, self._parts[i])
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
        try:
            if self._part is not None or not self._parts:
                with self._writing():
                    part = self._open_part()
                self._close_part(part)
            if self._remote is not None:  # the parts are uploaded: the manifest commits
                remote, self._remote = self._remote, None
                manifest = kinds.Manifest(self._schema, tuple(self._parts), self.metadata)
                self._staging = None
                return remote.finish(manifest)
            staging, self._staging = self._staging, None
            if self._base is not None:
                new = kinds.Manifest(self._schema, tuple(self._parts), self.metadata)
                return commit_append(staging, self.path, self._base, new)
            done = commit(
                staging, self.path, self._schema, self._parts, self.metadata, self._overwrite
            )
        except BaseException:
            self.abort()  # what is left of the staging folder
            raise
        finally:
            self._release()
        return done

    def abort(self) -> None:
        """Discard everything written: nothing is left at ``path`` (an appender's dataset is
        unchanged; for a URL, nothing was uploaded), the staging folder is removed and the
        lock released. Never raises."""
        part, self._part = getattr(self, "_part", None), None  # None: __init__ did not finish
        staging, self._staging = getattr(self, "_staging", None), None
        remote, self._remote = getattr(self, "_remote", None), None
        try:
            if part is not None:
                part.abort()
        finally:
            try:
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
                if remote is not None:
                    remote.discard()
            finally:
                self._release()

    def _release(self) -> None:
        """Let the next appender of ``path`` in (an appending writer holds its lock)."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()  # which aborts if it fails
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_staging", None) is not None:
            self.abort()


def row_bytes(batch: Mapping[str, Any], n: int) -> int:
    """About how many bytes a sample of ``batch`` (``n`` samples) takes: array fields by
    their size, list fields by their first 64 items."""
    total = 0
    for v in batch.values():
        if isinstance(v, (list, tuple)):
            head = v[:64]
            sizes = [
                getattr(e, "nbytes", len(e) if isinstance(e, (str, bytes)) else 8) for e in head
            ]
            total += sum(sizes) // max(len(head), 1) + 8
        else:
            total += getattr(v, "nbytes", 64 * max(n, 1)) // max(n, 1)
    return total
