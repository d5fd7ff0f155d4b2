"""Reading datasets: ``chute.open`` -> a lazy, picklable :class:`Dataset`.

Opening reads the manifest and checks the data files (:mod:`chute.reader.files`): a truncated file
fails here and not mid-epoch, and each file's identity (device, inode, size, mtime) is kept.
A file is memory-mapped on first use, after checking that it is still the file ``open()``
saw; a worker process that unpickles the dataset checks them all; and every read checks the
files it read again (``gather`` and ``ds[a:b]`` on every call, ``ds[i]`` at most every
:data:`RECHECK_INTERVAL`). A dataset replaced since ``open()`` (``overwrite=True``) is thus a
:class:`DatasetChangedError`, never a mix of the old and the new data.

Maps are read-only (``ACCESS_READ``): reads share the OS page cache across processes, and
nothing in the process can change what later reads see (a write into a map raises). So
``ds[i]`` and ``ds[a:b]`` return fresh tensors, copied once out of the map as any loader's
samples are, which the caller may modify; ``gather`` takes rows straight from the map
(:mod:`chute.columns.gather`) into new tensors or into the caller's ``out=`` buffers (the Loader's
path: no copy but that one). This module holds the indexing: which part and rows a key means.
"""

from __future__ import annotations

import math
import os
import pickle
import threading
import zlib
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from time import monotonic
from typing import Any

import numpy as np
import torch

from .. import kinds
from .._args import check_path
from .._arrays import distinct
from ..batch import Pad
from ..columns.gather import FieldPart, Piece, Split
from ..errors import ArgumentError
from ..kinds import empty_buffers
from ..kinds.kind import Sampler
from .files import Part, Snapshot, check, snapshot
from .gather_args import check_gather_args, check_indices, out_of_range
from .samples import ReadsBatches

Batch = dict[str, Any]
Reader = tuple[str, Sampler, dict[str, np.ndarray], FieldPart]
"""What ``ds[i]`` reads of one field in one part: name, sampler, the part's arrays, files."""

RECHECK_INTERVAL = 0.1
"""Seconds between two checks, by ``ds[i]``, that the mapped files of the parts it read are
still those ``open()`` saw (:meth:`Files.recheck <chute.reader.files.Files.recheck>`: one
``stat`` a file, which would be half of a sample's cost if done on every call). The first
``ds[i]`` checks, then the first one at least this long after the previous check, and any
``ds[i]`` whose read fails: a dataset replaced or rewritten in place is a
:class:`~chute.errors.DatasetChangedError` within this interval of reads. ``gather`` and
``ds[a:b]`` check on every call (a batch's cost amortises it)."""


class Dataset(ReadsBatches, torch.utils.data.Dataset):
    """A chute dataset on disk: ``len(ds)``, ``ds[i]``, ``ds[a:b]``, ``ds.gather(indices)``.

    Create with :func:`chute.open`. ``ds[i]`` and ``ds[a:b]`` give fresh tensors (fixed and
    ragged fields; ragged batches as :class:`chute.RaggedBatch`) and ``str`` for strings;
    ``gather`` fills the caller's ``out=`` buffers. An image field is decoded by ``ds[i]``
    only: ``ds[a:b]`` and ``gather`` give :class:`~chute.columns.encoded_images.EncodedImages`.
    ``"image" in ds`` asks for a field.
    """

    def __init__(
        self,
        path: str | bytes | os.PathLike,
        fields: Sequence[str] | None = None,
        *,
        in_memory: bool = False,
    ):
        # Absolute now: the files are mapped later, maybe after a chdir, maybe in a worker.
        path = check_path(path).absolute()
        self._fields_arg = None if fields is None else list(fields)
        self._set(path, snapshot(path, fields, in_memory))

    def _set(self, path: Path, snap: Snapshot) -> None:
        """Take what ``open()`` checked (or, unpickled, checks again: see :func:`check`)."""
        self.path = path
        self._manifest = snap.manifest
        self._blob: bytes | None = None  # what __getstate__ sends, made on first use
        self.metadata: Mapping[str, Any] = snap.manifest.metadata
        self.schema: dict[str, kinds.Field] = snap.schema
        # Made once here, so that ds[i] builds nothing but its result: each field's reader,
        # and per (part, field) its arrays and files (paths built only for an error).
        self._samplers = tuple((name, f.sampler()) for name, f in self.schema.items())
        self._files = snap.files
        self._parts = snap.parts
        self._columns: dict[tuple[int, str], tuple[dict[str, np.ndarray], FieldPart]] = {}
        self._readers: dict[int, tuple[Reader, ...]] = {}  # part -> (see _part_readers)
        self._mapping = threading.Lock()  # guards _part_locks
        self._part_locks: dict[tuple[int, str], threading.Lock] = {}
        self._len = sum(p.num_samples for p in self._parts)
        self._ends = np.array([p.start + p.num_samples for p in self._parts], np.int64)
        self._ends_list = self._ends.tolist()  # for bisect in ds[i]: no numpy call per sample
        # ds[i]'s throttled recheck: the parts read since the last one (None: in memory, no
        # files to check) and when it was (the monotonic clock).
        self._read: set[int] | None = None if self._files.in_memory else set()
        self._checked = -math.inf
        if self._files.in_memory and self._files.stale is None:
            for i in range(len(self._parts)):
                for name in self.schema:
                    self._column(i, name)

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts: name, folder, first sample, sample count, and the manifest's size and
        checksum of each file."""
        return self._parts

    def _column(self, part: int, name: str) -> tuple[dict[str, np.ndarray], FieldPart]:
        """Field ``name``'s arrays in part ``part`` (mapped on first use) and its files."""
        got = self._columns.get((part, name))
        if got is None:
            with self._mapping:
                lock = self._part_locks.setdefault((part, name), threading.Lock())
            with lock:  # loader threads meeting a new part map its files once
                got = self._columns.get((part, name))
                if got is None:
                    p, f = self._parts[part], self.schema[name]
                    col = self._files.column(p, name, f)
                    names = f.files(name)
                    allocated = None
                    if "values" in names:  # bytes on disk, bounding what a read allocates
                        allocated = self._files.allocated.get(str(p.folder / names["values"]))
                    got = col, FieldPart(p.folder, names, allocated, self.path, name, p.start)
                    self._columns[part, name] = got
        return got

    def _part_readers(self, part: int) -> tuple[Reader, ...]:
        """For each field: its name, sampler, arrays and files in part ``part`` (ds[i] looks up
        one entry per sample, not one per field)."""
        got = self._readers.get(part)
        if got is None:
            got = tuple((name, read, *self._column(part, name)) for name, read in self._samplers)
            self._readers[part] = got
        return got

    def check_files(self) -> None:
        """Map every file of the selected fields now and check its header and offsets against
        the manifest (``chute verify`` does, after the checksums); else a FormatError."""
        for i in range(len(self._parts)):
            for name in self.schema:
                self._column(i, name)

    # ------------------------------------------------------------------ access

    def __len__(self) -> int:
        return self._len

    def _locate(self, i: int) -> tuple[int, int]:
        if not -self._len <= i < self._len:
            raise out_of_range(i, self._len, self.path)
        if i < 0:
            i += self._len
        part = bisect_right(self._ends_list, i)
        return part, i - self._parts[part].start

    def __contains__(self, name: object) -> bool:
        """``"image" in ds``: whether ``image`` is one of the (selected) fields."""
        return isinstance(name, str) and name in self.schema

    def __getitem__(self, key: int | slice | np.integer | torch.Tensor) -> Batch:
        """Sample ``key`` (an int; numpy ints and 0-d integer tensors too) or the samples of a
        slice, as fresh tensors.

        Image fields differ by key: ``ds[i]["image"]`` is one image, decoded (uint8
        ``(3, H, W)``), while a slice ``ds[a:b]["image"]``, like :meth:`gather`, is a batch of
        :class:`~chute.EncodedImages` (the stored bytes plus each image's size;
        ``.decode(k)`` decodes one), as images of different sizes make no single tensor. For
        decoded, equal-sized batches use a loader's ``decode=`` (``chute/loader/decode.py``).
        """
        if type(key) is not int:
            if isinstance(key, slice):
                return self._slice(*key.indices(self._len))
            key = self._index(key)
        part, j = self._locate(key)
        out: Batch = {}
        try:
            for name, sample, col, at in self._readers.get(part) or self._part_readers(part):
                out[name] = sample(col, j, at)
        except Exception:
            self._recheck((part,))  # a file replaced since open() explains a failed read best
            raise
        if self._read is not None:  # mapped files: check them at most every RECHECK_INTERVAL
            self._read.add(part)
            now = monotonic()
            if now - self._checked >= RECHECK_INTERVAL:
                self._recheck_read(now)
        return out

    def _recheck_read(self, now: float) -> None:
        """Check the files of the parts ``ds[i]`` read since the last check (``now``: the
        monotonic clock); see :data:`RECHECK_INTERVAL`."""
        assert self._read is not None
        parts = tuple(self._read)  # a snapshot: other threads may be reading
        self._recheck(parts)
        self._read.difference_update(parts)
        self._checked = now

    def _recheck(self, parts: Any) -> None:
        """The mapped files of ``parts`` (indices) are still those ``open()`` saw: checked
        after each read, so a batch read from a file rewritten in place is never handed out
        (see :meth:`Files.recheck <chute.reader.files.Files.recheck>`)."""
        if not self._files.in_memory:
            for p in parts:
                for name in self.schema:
                    self._files.recheck(self._parts[p], name)

    def _index(self, key: Any) -> int:
        """``key`` as an int: a Python or numpy int, or a 0-d integer array or tensor."""
        if isinstance(key, (np.ndarray, torch.Tensor)) and key.ndim == 0:
            key = key.item()
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return int(key)
        if isinstance(key, (list, tuple, range, np.ndarray, torch.Tensor)):
            raise ArgumentError(
                f"ds[...] takes one int or a slice, not a {type(key).__name__}; for several "
                "samples as one batch use ds.gather(indices)"
            )
        hint = ""
        if isinstance(key, str) and key in self.schema:
            hint = f"; read a field as ds[i][{key!r}], or open with fields=[{key!r}]"
        raise ArgumentError(f"dataset indices are ints or slices, not {type(key).__name__}{hint}")

    def _slice(self, start: int, stop: int, step: int) -> Batch:
        """A step-1 slice inside one part is one copy of each field's rows; else a gather."""
        part = int(np.searchsorted(self._ends, start, side="right"))
        if step != 1 or stop <= start or part == len(self._parts) or stop > self._ends[part]:
            return self.gather(np.arange(start, stop, step))
        a, b = start - self._parts[part].start, stop - self._parts[part].start
        out: Batch = {}
        for name, f in self.schema.items():
            col, at = self._column(part, name)
            out[name] = f.take(col, a, b, at)
        self._recheck([part])
        return out

    def __iter__(self) -> Iterator[Batch]:
        for i in range(self._len):
            yield self[i]

    def _split(self, idx: np.ndarray) -> Split:
        """(part, positions in the batch or None for all, local indices) for each part hit."""
        if len(self._parts) == 1:
            return [(0, None, idx)]
        part_of = np.searchsorted(self._ends, idx, side="right")
        out: Split = []
        for p in distinct(part_of):
            pos = np.flatnonzero(part_of == p)
            out.append((int(p), pos, idx[pos] - self._parts[p].start))
        return out

    def gather(
        self,
        indices: Any,
        out: Mapping[str, torch.Tensor] | None = None,
        pad: Pad | None = None,
    ) -> Batch:
        """Samples ``indices`` as one batch, in the order given.

        Fixed fields -> ``(B, *shape)`` tensors, written into ``out[field][:B]`` when given
        (e.g. pinned buffers from :meth:`empty_batch`); ragged and bytes fields ->
        :class:`RaggedBatch`, or with ``pad=`` a padded ``(B, L, ...)`` tensor plus
        ``FIELD_lengths`` (B,) (``(B, *max_shape)`` and the shapes ``(B, ndim)`` when several
        dimensions vary); string fields -> ``list[str]``; image fields ->
        :class:`~chute.EncodedImages`, not decoded (``ds[i]`` decodes one sample;
        a loader's ``decode=`` decodes batches). ``pad``: one number, or ``{field: number}``
        (0 for a field it does not name); it must fit each padded field's dtype exactly (no
        silent truncation or overflow).
        """
        idx = check_indices(indices, self._len, self.path)
        check_gather_args(self.schema, out, pad, "open it with fields=")
        b = len(idx)
        split = self._split(idx)
        batch: Batch = {}
        for name, f in self.schema.items():
            batch.update(f.gather(name, self._pieces(name, split), b, out, pad))
        self._recheck(p for p, _, _ in split)
        return batch

    def _pieces(self, name: str, split: Split) -> list[Piece]:
        """Each part's arrays of field ``name`` for the batch that ``split`` locates."""
        pieces = []
        for p, pos, local in split:
            col, at = self._column(p, name)
            pieces.append(Piece(col, at, pos, local, at.allocated))
        return pieces

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pre-allocated ``out=`` buffers for :meth:`gather`, one per fixed-shape field."""
        return empty_buffers(self.schema, batch_size, pin_memory)

    def to_memory(self) -> Dataset:
        """The same dataset read fully into RAM (sequential reads, at disk speed): the files
        ``open()`` saw, else :class:`DatasetChangedError`. Samples are fresh copies too."""
        mem = type(self).__new__(type(self))
        mem.__setstate__({**self.__getstate__(), "in_memory": True})
        if mem._files.stale is not None:
            raise mem._files.changed(mem._files.stale)
        return mem

    @property
    def classes(self) -> list[str]:
        """The class names by label, as torchvision's ``ImageFolder.classes``: a dataset
        converted from an image folder keeps them (``metadata["classes"]``); else empty."""
        return list(self.metadata.get("classes", ()))

    @property
    def class_to_idx(self) -> dict[str, int]:
        """``{class name: label}``, as torchvision's ``ImageFolder.class_to_idx``."""
        return {name: label for label, name in enumerate(self.classes)}

    @property
    def nbytes(self) -> int:
        """Bytes on disk of the selected fields."""
        return sum(
            p.files[fn].nbytes
            for p in self._parts
            for name, f in self.schema.items()
            for fn in f.files(name).values()
        )

    def close(self) -> None:
        """Release the file maps and their file handles now (each map is unmapped once no
        batch refers to it; a :meth:`to_memory` dataset drops its copy). Intended: the dataset
        stays usable, and a later read maps the files again (or reads them into memory again),
        after checking they are still the files ``open()`` saw (else
        :class:`~chute.DatasetChangedError`). ``with chute.open(path) as ds:`` closes on exit."""
        self._columns.clear()
        self._readers.clear()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Pickle as (path, options) plus what open() saw: the manifest and each file's
        # identity. Each worker process maps the files itself (fork and spawn share the page
        # cache, nothing is copied on write) and checks that they are still those files. The
        # manifest and identities travel compressed (part lists and paths repeat: ~10x
        # smaller), made once and reused for every worker.
        if self._blob is None:
            seen = (self._manifest.to_json(), self._files.identity)
            self._blob = zlib.compress(pickle.dumps(seen, protocol=pickle.HIGHEST_PROTOCOL), 1)
        return {
            "path": str(self.path),
            "fields": self._fields_arg,
            "in_memory": self._files.in_memory,
            "seen": self._blob,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        path = Path(state["path"])
        manifest_json, identity = pickle.loads(zlib.decompress(state["seen"]))
        manifest = kinds.parse_manifest(manifest_json)
        self._fields_arg = state["fields"]
        self._set(path, check(path, manifest, state["fields"], state["in_memory"], identity))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {v}" for k, v in self.schema.items())
        return f"chute.Dataset({str(self.path)!r}, {self._len} samples, {{{fields}}})"
