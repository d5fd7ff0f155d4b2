"""Reading datasets: ``chute.open`` -> a lazy, picklable :class:`Dataset`.

Opening reads the manifest and checks the data files (:mod:`chute.reader.files`): a truncated file
fails here and not mid-epoch, and each file's identity (device, inode, size, mtime) is kept.
A file is memory-mapped on first use, after checking that it is still the file ``open()``
saw; a worker process that unpickles the dataset checks them all. A dataset replaced since
``open()`` (``overwrite=True``) is thus a :class:`DatasetChangedError`, never a mix of the old
and the new data.

Maps are read-only (``ACCESS_READ``): reads share the OS page cache across processes, and
nothing in the process can change what later reads see (a write into a map raises). So
``ds[i]`` and ``ds[a:b]`` return fresh tensors, copied once out of the map as any loader's
samples are, which the caller may modify; ``gather`` takes rows straight from the map
(:mod:`chute.reader.gather`) into new tensors or into the caller's ``out=`` buffers (the Loader's
path: no copy but that one). This module holds the indexing: which part and rows a key means.
"""

from __future__ import annotations

import os
import pickle
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import format as fmt
from .._args import check_path
from .._arrays import distinct
from .._torch import empty_buffers, to_torch
from ..batch import RaggedBatch, pad_batch
from ..errors import ArgumentError
from .files import Part, Snapshot, check, snapshot
from .gather import (
    Piece,
    Split,
    check_backed,
    check_gather_args,
    check_indices,
    check_shapes,
    checked_offsets,
    gather_fixed,
    gather_var,
    out_of_range,
    out_rows,
    strings,
)
from .images import decode_sample, gather_images, slice_images

Batch = dict[str, Any]


class Dataset(torch.utils.data.Dataset):
    """A chute dataset on disk: ``len(ds)``, ``ds[i]``, ``ds[a:b]``, ``ds.gather(indices)``.

    Create with :func:`chute.open`. ``ds[i]`` and ``ds[a:b]`` give fresh tensors (fixed and
    ragged fields; ragged batches as :class:`chute.RaggedBatch`) and ``str`` for strings;
    ``gather`` fills the caller's ``out=`` buffers. ``"image" in ds`` asks for a field.
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
        self.schema: dict[str, fmt.Field] = snap.schema
        self._fixed = frozenset(k for k, f in self.schema.items() if isinstance(f, fmt.Tensor))
        self._files = snap.files
        self._parts = snap.parts
        self._columns: dict[tuple[int, str], dict[str, np.ndarray]] = {}  # mapped on first use
        self._mapping = threading.Lock()  # guards _part_locks
        self._part_locks: dict[tuple[int, str], threading.Lock] = {}
        self._len = sum(p.num_samples for p in self._parts)
        self._ends = np.array([p.start + p.num_samples for p in self._parts], np.int64)
        if self._files.in_memory and self._files.stale is None:
            for i in range(len(self._parts)):
                for name in self.schema:
                    self._column(i, name)

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts: name, folder, first sample, sample count, and the manifest's size and
        checksum of each file."""
        return self._parts

    def _file(self, part: int, name: str, role: str) -> Path:
        """The file of field ``name``'s ``role`` in part ``part`` (for error messages)."""
        return self._parts[part].file(name, self.schema[name], role)

    def _column(self, part: int, name: str) -> dict[str, np.ndarray]:
        col = self._columns.get((part, name))
        if col is None:
            with self._mapping:
                lock = self._part_locks.setdefault((part, name), threading.Lock())
            with lock:  # loader threads meeting a new part map its files once
                col = self._columns.get((part, name))
                if col is None:
                    col = self._files.column(self._parts[part], name, self.schema[name])
                    self._columns[part, name] = col
        return col

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
        i %= self._len
        part = int(np.searchsorted(self._ends, i, side="right"))
        return part, i - self._parts[part].start

    def __contains__(self, name: object) -> bool:
        """``"image" in ds``: whether ``image`` is one of the (selected) fields."""
        return isinstance(name, str) and name in self.schema

    def __getitem__(self, key: int | slice | np.integer | torch.Tensor) -> Batch:
        """Sample ``key`` (an int; numpy ints and 0-d integer tensors too) or the samples of a
        slice, as fresh tensors."""
        if isinstance(key, slice):
            return self._slice(*key.indices(self._len))
        part, j = self._locate(self._index(key))
        out: Batch = {}
        for name, f in self.schema.items():
            col = self._column(part, name)
            if isinstance(f, fmt.Tensor):
                out[name] = to_torch(col["data"][j, ...], f.dtype)
                continue
            offsets = checked_offsets(col, j, j + 1, self._file(part, name, "offsets"))
            values = self._var_values(col, offsets, part, name, f"sample {j} of this part")
            if isinstance(f, fmt.Image):  # decoded, uint8 (3, H, W): chute.reader.images
                index = self._parts[part].start + j
                out[name] = decode_sample(values, col["sizes"][j], self.path, name, index)
            elif isinstance(f, fmt.String):
                where = f"{self.path}: field {name!r}, sample {self._parts[part].start + j}"
                out[name] = strings(values, np.array([0, len(values)]), where)[0]
            elif "shapes" in col:
                shape = col["shapes"][j : j + 1]
                check_shapes(
                    shape, np.diff(offsets), f.inner_shape, self._file(part, name, "shapes")
                )
                out[name] = to_torch(values.reshape(shape[0]), f.dtype)
            else:
                out[name] = to_torch(values, f.dtype)
        self._recheck([part])
        return out

    def _var_values(
        self, col: dict[str, np.ndarray], offsets: np.ndarray, part: int, name: str, what: str
    ) -> np.ndarray:
        """The values between ``offsets[0]`` and ``offsets[-1]`` (a view of the map), once
        checked that the values file can back them (:func:`check_backed`)."""
        values = col["values"][offsets[0] : offsets[-1]]
        file = self._file(part, name, "values")
        check_backed(values.nbytes, self._files.allocated.get(str(file)), file, what)
        return values

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
            col = self._column(part, name)
            if isinstance(f, fmt.Tensor):
                out[name] = to_torch(col["data"][a:b], f.dtype)
                continue
            offsets = checked_offsets(col, a, b, self._file(part, name, "offsets"))
            values = self._var_values(col, offsets, part, name, f"samples {a}..{b - 1}")
            offsets = offsets - offsets[0]
            if isinstance(f, fmt.String):
                out[name] = strings(values, offsets, f"{self.path}: field {name!r}")
                continue
            if isinstance(f, fmt.Image):  # encoded: chute.reader.images.EncodedImages
                where = self._file(part, name, "sizes")
                out[name] = slice_images(values, offsets, col["sizes"][a:b], where)
                continue
            shapes = None
            if "shapes" in col:
                rows = col["shapes"][a:b]
                lengths = np.diff(offsets)
                check_shapes(rows, lengths, f.inner_shape, self._file(part, name, "shapes"))
                shapes = to_torch(rows, "int64")
            out[name] = RaggedBatch(to_torch(values, f.dtype), torch.from_numpy(offsets), shapes)
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
        pad: float | int | None = None,
    ) -> Batch:
        """Samples ``indices`` as one batch, in the order given.

        Fixed fields -> ``(B, *shape)`` tensors, written into ``out[field][:B]`` when given
        (e.g. pinned buffers from :meth:`empty_batch`); ragged and bytes fields ->
        :class:`RaggedBatch`, or with ``pad=`` a padded ``(B, L, ...)`` tensor plus
        ``FIELD_lengths`` (B,) (``(B, *max_shape)`` and the shapes ``(B, ndim)`` when several
        dimensions vary); string fields -> ``list[str]``. ``pad`` must fit each padded field's
        dtype exactly (no silent truncation or overflow).
        """
        idx = check_indices(indices, self._len, self.path)
        check_gather_args(self.schema, out, pad, "open it with fields=")
        b = len(idx)
        split = self._split(idx)
        batch: Batch = {}
        for name, f in self.schema.items():
            if isinstance(f, fmt.Tensor):
                batch[name] = self._gather_fixed(name, f, split, b, out)
                continue
            if isinstance(f, fmt.Image):  # encoded: chute.reader.images.EncodedImages
                pieces = self._pieces(name, split)
                batch[name] = gather_images(pieces, b)
                continue
            rb = self._gather_var(name, f, split, b)
            if isinstance(f, fmt.String):
                where = f"{self.path}: field {name!r}"
                batch[name] = strings(rb.values.numpy(), rb.offsets.numpy(), where)
            elif pad is not None:
                batch[name], batch[f"{name}_lengths"] = pad_batch(rb, pad, name)
            else:
                batch[name] = rb
        self._recheck(p for p, _, _ in split)
        return batch

    def _pieces(self, name: str, split: Split) -> list[Piece]:
        """Each part's arrays of field ``name`` for the batch that ``split`` locates."""
        f = self.schema[name]
        pieces = []
        for p, pos, local in split:
            files = {r: self._parts[p].folder / fn for r, fn in fmt.field_files(name, f).items()}
            allocated = (
                self._files.allocated.get(str(files["values"])) if "values" in files else None
            )
            pieces.append(Piece(self._column(p, name), files, pos, local, allocated))
        return pieces

    def _gather_fixed(
        self, name: str, f: fmt.Tensor, split: Split, b: int, out: Mapping[str, Any] | None
    ) -> torch.Tensor:
        pieces = self._pieces(name, split)
        if out is None or name not in out:
            return to_torch(gather_fixed(pieces, f, b), f.dtype)
        t = out[name]
        gather_fixed(pieces, f, b, out_rows(t, name, f, b))
        return t if len(t) == b else t[:b]

    def _gather_var(
        self, name: str, f: fmt.Ragged | fmt.Bytes | fmt.String, split: Split, b: int
    ) -> RaggedBatch:
        return gather_var(self._pieces(name, split), f, b)

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
    def nbytes(self) -> int:
        """Bytes on disk of the selected fields."""
        return sum(
            p.files[fn].nbytes
            for p in self._parts
            for name, f in self.schema.items()
            for fn in fmt.field_files(name, f).values()
        )

    def close(self) -> None:
        """Release the file maps and their file handles now (each map is unmapped once no
        batch refers to it; a :meth:`to_memory` dataset drops its copy). Intended: the dataset
        stays usable, and a later read maps the files again (or reads them into memory again),
        after checking they are still the files ``open()`` saw (else
        :class:`~chute.DatasetChangedError`). ``with chute.open(path) as ds:`` closes on exit."""
        self._columns.clear()

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
        manifest = fmt.parse_manifest(manifest_json)
        self._fields_arg = state["fields"]
        self._set(path, check(path, manifest, state["fields"], state["in_memory"], identity))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {v}" for k, v in self.schema.items())
        return f"chute.Dataset({str(self.path)!r}, {self._len} samples, {{{fields}}})"
