"""Reading datasets: ``chute.open`` -> a lazy, picklable :class:`Dataset`.

Opening reads the manifest and stats the data files: sizes are checked, so a truncated file
fails here and not mid-epoch, and each file's identity (device, inode, size, mtime) is kept.
A file is memory-mapped on first use, after checking that it is still the file ``open()``
saw; a worker process that unpickles the dataset checks them all. A dataset replaced since
``open()`` (``overwrite=True``) is thus a :class:`DatasetChangedError`, never a mix of the old
and the new data.

Maps are read-only (``ACCESS_READ``): reads share the OS page cache across processes, and
nothing in the process can change what later reads see (a write into a map raises). So
``ds[i]`` and ``ds[a:b]`` return fresh tensors, copied once out of the map as any loader's
samples are, which the caller may modify; ``gather`` takes rows straight from the map into new
tensors or into the caller's ``out=`` buffers (the Loader's path: no copy but that one).
"""

from __future__ import annotations

import builtins
import itertools
import json
import math
import mmap
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from . import format as fmt
from .errors import (
    ArgumentError,
    DatasetChangedError,
    DatasetNotFoundError,
    FormatError,
    SampleIndexError,
    SchemaError,
    UnsafePathError,
)
from .fetch import RaggedBatch, check_shapes, checked_offsets, pad_batch, take_rows, var_take
from .npyio import MAX_HEADER_BYTES, check_size, read_header

MAX_MANIFEST_BYTES = 256 << 20
Batch = dict[str, Any]
Identity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def stat_file(file: Path, root: str) -> os.stat_result:
    """``os.stat`` of ``file``, which must resolve to a regular file inside the folder ``root``
    (a real path): no symlink out of the dataset, no FIFO or device that would block."""
    real = os.path.realpath(file)
    if not real.startswith(root + os.sep):
        raise UnsafePathError(f"{file} resolves to {real}, outside the dataset {root}")
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"{file} is not a regular file; a dataset holds only plain files")
    return st


def _identity(st: os.stat_result) -> Identity:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON readers disagree on which duplicate wins: refuse, so that every tool reads the same.
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise FormatError(f"duplicate key {key!r} in the manifest")
        seen.add(key)
    return dict(pairs)


def read_manifest(path: str | os.PathLike) -> fmt.Manifest:
    """Read and validate ``PATH/chute.json``."""
    path = Path(path)
    file = path / fmt.MANIFEST
    if not path.is_dir():
        raise DatasetNotFoundError(f"{path}: no such dataset folder")
    try:
        size = stat_file(file, os.path.realpath(path)).st_size
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"{path} is not a chute dataset: it has no {fmt.MANIFEST} "
            "(an unfinished write leaves none)"
        ) from None
    if size > MAX_MANIFEST_BYTES:
        raise FormatError(f"{file}: manifest of {size} bytes is too large")
    try:
        obj = json.loads(file.read_bytes().decode("utf-8"), object_pairs_hook=_unique_keys)
    except FormatError as exc:
        raise FormatError(f"{file}: {exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(f"{file}: not valid JSON ({exc})") from None
    try:
        return fmt.parse_manifest(obj)
    except FormatError as exc:
        raise type(exc)(f"{file}: {exc}") from None


def _to_torch(arr: np.ndarray, dtype: str) -> torch.Tensor:
    # torch only ever gets writable memory: a view of a (read-only) map is copied out first.
    # Gathers are fresh arrays already. torch.from_numpy of a read-only array warns, and a
    # write through the tensor would crash the process.
    if not arr.flags.writeable:
        arr = np.array(arr)
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view("<u2") if t.dtype == torch.bfloat16 else t.numpy()


class _Part:
    def __init__(self, info: fmt.PartInfo, folder: Path, start: int):
        self.info, self.folder, self.start = info, folder, start
        self.columns: dict[str, dict[str, np.ndarray]] = {}


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
        path = fmt.check_path(path).absolute()
        self._setup(path, read_manifest(path), fields, in_memory, None)

    def _setup(
        self,
        path: Path,
        manifest: fmt.Manifest,
        fields: Sequence[str] | None,
        in_memory: bool,
        opened: Mapping[str, Identity] | None,
    ) -> None:
        """Build the dataset from its manifest, stat'ing every selected file. ``opened``: the
        file identities seen by the ``open()`` this copy comes from (unpickling, to_memory).
        A file that is not the one ``open()`` saw makes every read raise, not this: in a
        spawned worker an error while unpickling kills the process without a message, while
        an error in a read reaches the main process."""
        if isinstance(fields, str):
            raise SchemaError("fields= takes a list of field names, not a string")
        self.path = path
        self._fields_arg = None if fields is None else list(fields)
        self._in_memory = in_memory
        self._manifest = manifest
        self.metadata: Mapping[str, Any] = manifest.metadata
        unknown = [f for f in fields or () if f not in manifest.fields]
        if unknown:
            raise SchemaError(
                f"{self.path}: no field(s) {unknown}; the dataset has {sorted(manifest.fields)}"
            )
        self.schema: dict[str, fmt.Field] = {
            k: v for k, v in manifest.fields.items() if fields is None or k in fields
        }
        self._fixed = frozenset(k for k, f in self.schema.items() if isinstance(f, fmt.Tensor))
        self._root = os.path.realpath(self.path)
        self._identity: dict[str, Identity] = dict(opened or {})
        self._stale: Path | None = None  # a file replaced since open()
        self._parts: list[_Part] = []
        start = 0
        for info in manifest.parts:
            folder = self.path / info.name
            self._parts.append(_Part(info, folder, start))
            start += info.num_samples
            for name, f in self.schema.items():
                for role, fn in fmt.field_files(name, f).items():
                    data = _data_nbytes(f, role, info.num_samples)
                    self._check_file(folder / fn, info.files[fn].nbytes, data, opened)
        self._len = start
        self._ends = np.array([p.start + p.info.num_samples for p in self._parts], np.int64)
        if in_memory and self._stale is None:
            for i in range(len(self._parts)):
                for name in self.schema:
                    self._column(i, name)

    # ------------------------------------------------------------------ files

    def _check_file(
        self, file: Path, nbytes: int, data: int | None, opened: Mapping[str, Identity] | None
    ) -> None:
        """The file is as big as the manifest says, and that is what the manifest's sample
        count and shape need (``data`` bytes, None when only the offsets tell) plus a header:
        so nothing is ever sized from a count or shape that the files do not back. Its
        identity is recorded (and must be ``opened``'s when given)."""
        try:
            st = stat_file(file, self._root)
        except FileNotFoundError:
            if opened is None:
                raise FormatError(f"{file} is missing; the dataset is incomplete") from None
            self._stale = self._stale or file
            return
        identity = _identity(st)
        if opened is not None and opened.get(str(file)) != identity:
            self._stale = self._stale or file
            return
        self._identity[str(file)] = identity
        if st.st_size != nbytes:
            raise FormatError(
                f"{file} is {st.st_size} bytes but the manifest says {nbytes}: the file was "
                "truncated or modified after writing"
            )
        if data is not None and not 0 < nbytes - data <= MAX_HEADER_BYTES:
            raise FormatError(
                f"{file} is {nbytes} bytes but the manifest's sample count and shape need "
                f"{data} bytes of data plus a header; the manifest does not describe this file"
            )

    def _changed(self, file: Path) -> DatasetChangedError:
        return DatasetChangedError(
            f"{self.path} was replaced or modified since chute.open(): {file} is not the file "
            "that was opened; open the dataset again"
        )

    def _load(self, file: Path, dtype: str, shape: tuple[int, ...] | None) -> np.ndarray:
        """Map (or read, when in memory) one .npy file after checking that it is the file
        ``open()`` saw and its header; the array is read-only."""
        want = fmt.storage_dtype(dtype)
        try:
            with builtins.open(file, "rb") as f:
                st = os.fstat(f.fileno())
                if _identity(st) != self._identity[str(file)]:
                    raise self._changed(file)
                got, got_shape, offset = read_header(f, str(file))
                if got != want or (shape is not None and got_shape != shape):
                    raise FormatError(
                        f"{file}: holds {got_shape} {got} but the manifest says {shape} {want}"
                    )
                check_size(str(file), got, got_shape, offset, st.st_size)
                nbytes = st.st_size - offset
                if nbytes == 0:
                    arr = np.zeros(got_shape, got)
                elif self._in_memory:
                    arr = np.empty(got_shape, got)
                    f.readinto(memoryview(arr.reshape(-1).view(np.uint8)))
                else:
                    buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    arr = np.frombuffer(buf, got, nbytes // got.itemsize, offset)
                    arr = arr.reshape(got_shape)
        except FileNotFoundError:  # gone since open(): the dataset was replaced or removed
            raise self._changed(file) from None
        arr.flags.writeable = False
        return arr

    def _file(self, part: int, name: str, role: str) -> Path:
        """The file of field ``name``'s ``role`` in part ``part`` (for error messages)."""
        return self._parts[part].folder / fmt.field_files(name, self.schema[name])[role]

    def _column(self, part: int, name: str) -> dict[str, np.ndarray]:
        if self._stale is not None:
            raise self._changed(self._stale)
        p = self._parts[part]
        col = p.columns.get(name)
        if col is not None:
            return col
        f = self.schema[name]
        files = fmt.field_files(name, f)
        n = p.info.num_samples
        if isinstance(f, fmt.Tensor):
            col = {"data": self._load(p.folder / files["data"], f.dtype, (n, *f.shape))}
        else:
            offsets = self._load(p.folder / files["offsets"], "int64", (n + 1,))
            values = self._load(p.folder / files["values"], f.dtype, None)
            inner = () if f.variable_dims else f.inner_shape
            if values.shape[1:] != inner or offsets[0] != 0 or offsets[-1] != len(values):
                raise FormatError(
                    f"{p.folder / files['values']}: values {values.shape} do not match the "
                    f"offsets (0..{int(offsets[-1])}) and inner shape {inner}"
                )
            col = {"values": values, "offsets": offsets}
            if f.variable_dims:
                col["shapes"] = self._load(
                    p.folder / files["shapes"], "int64", (n, 1 + len(f.inner_shape))
                )
        p.columns[name] = col
        return col

    # ------------------------------------------------------------------ access

    def __len__(self) -> int:
        return self._len

    def _locate(self, i: int) -> tuple[int, int]:
        if not -self._len <= i < self._len:
            self._out_of_range(i)
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
                out[name] = _to_torch(col["data"][j, ...], f.dtype)
                continue
            offsets = checked_offsets(col, j, j + 1, self._file(part, name, "offsets"))
            values = col["values"][offsets[0] : offsets[1]]
            if isinstance(f, fmt.String):
                out[name] = values.tobytes().decode("utf-8", errors="replace")
            elif "shapes" in col:
                shape = col["shapes"][j : j + 1]
                check_shapes(shape, offsets, f.inner_shape, self._file(part, name, "shapes"))
                out[name] = _to_torch(values.reshape(shape[0]), f.dtype)
            else:
                out[name] = _to_torch(values, f.dtype)
        return out

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
                out[name] = _to_torch(col["data"][a:b], f.dtype)
                continue
            offsets = checked_offsets(col, a, b, self._file(part, name, "offsets"))
            values, offsets = col["values"][offsets[0] : offsets[-1]], offsets - offsets[0]
            if isinstance(f, fmt.String):
                out[name] = _strings(values, offsets)
                continue
            shapes = None
            if "shapes" in col:
                rows = col["shapes"][a:b]
                check_shapes(rows, offsets, f.inner_shape, self._file(part, name, "shapes"))
                shapes = _to_torch(rows, "int64")
            out[name] = RaggedBatch(_to_torch(values, f.dtype), torch.from_numpy(offsets), shapes)
        return out

    def __iter__(self) -> Iterator[Batch]:
        for i in range(self._len):
            yield self[i]

    def _check_indices(self, indices: Any) -> np.ndarray:
        try:
            if isinstance(indices, torch.Tensor):
                idx = indices.detach().cpu().numpy()
            else:
                idx = np.asarray(indices)
        except (TypeError, ValueError) as exc:  # e.g. a ragged list of lists
            raise SampleIndexError(f"indices must be a 1-D array of ints ({exc})") from None
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise SampleIndexError(
                f"indices must be a 1-D array of ints, got {idx.dtype} {idx.shape}"
            )
        if idx.dtype.kind == "u":  # never negative; checked before int64 could wrap one
            if idx.size and idx.max() >= self._len:
                self._out_of_range(idx[idx >= self._len][0])
            return idx.astype(np.int64, copy=False)
        idx = idx.astype(np.int64, copy=False)
        # Fast path, one reduction: viewed as unsigned, a negative index is huge.
        if not idx.size or idx.view(np.uint64).max() < self._len:
            return idx
        if idx.min() < -self._len or idx.max() >= self._len:
            self._out_of_range(idx[(idx < -self._len) | (idx >= self._len)][0])
        return np.where(idx < 0, idx + self._len, idx)

    def _out_of_range(self, i: Any) -> NoReturn:
        raise SampleIndexError(f"index {i} is out of range for {self.path} ({self._len} samples)")

    def _split(self, idx: np.ndarray) -> list[tuple[int, np.ndarray | None, np.ndarray]]:
        """(part, positions in the batch or None for all, local indices) for each part hit."""
        if len(self._parts) == 1:
            return [(0, None, idx)]
        part_of = np.searchsorted(self._ends, idx, side="right")
        out = []
        for p in np.unique(part_of):
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
        idx = self._check_indices(indices)
        if out is not None and (not isinstance(out, Mapping) or not self._fixed.issuperset(out)):
            raise SchemaError(
                f"out= takes a dict of buffers for fixed-shape fields {sorted(self._fixed)} (see "
                f"empty_batch()); got {sorted(out) if isinstance(out, Mapping) else type(out)}"
            )
        if pad is not None:
            for name, f in self.schema.items():
                if isinstance(f, (fmt.Ragged, fmt.Bytes)) and f"{name}_lengths" in self.schema:
                    raise SchemaError(
                        f"pad= would add {name + '_lengths'!r} (the lengths of field {name!r}), "
                        "but the dataset has a field of that name; open it with fields= "
                        "without one of them, or pad yourself from the RaggedBatch"
                    )
        b = len(idx)
        split = self._split(idx)
        batch: Batch = {}
        for name, f in self.schema.items():
            if isinstance(f, fmt.Tensor):
                batch[name] = self._gather_fixed(name, f, idx, split, out)
                continue
            rb = self._gather_var(name, f, b, split)
            if isinstance(f, fmt.String):
                batch[name] = _strings(rb.values.numpy(), rb.offsets.numpy())
            elif pad is not None:
                batch[name], batch[f"{name}_lengths"] = pad_batch(rb, pad, name)
            else:
                batch[name] = rb
        return batch

    def _gather_fixed(self, name: str, f: fmt.Tensor, idx: np.ndarray, split: list, out: Any):
        b = len(idx)
        target = None
        if out is not None and name in out:
            t = out[name]
            want = (fmt.TORCH_DTYPES[f.dtype], f.shape)
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                got = f"a tensor on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise SchemaError(
                    f"out[{name!r}] must be a CPU tensor (pinned is fine), got {got}; "
                    "see empty_batch()"
                )
            if (t.dtype, tuple(t.shape[1:])) != want or len(t) < b or not t.is_contiguous():
                raise SchemaError(
                    f"out[{name!r}] is {t.dtype} {tuple(t.shape)}; need {want[0]} "
                    f"({b}+, {', '.join(map(str, f.shape))}) contiguous"
                )
            target = _as_numpy(t)
            target = target if len(target) == b else target[:b]
        if len(split) == 1 and split[0][1] is None:
            res = take_rows(self._column(0, name)["data"], idx, target)
        else:
            res = (
                target
                if target is not None
                else np.empty((b, *f.shape), fmt.storage_dtype(f.dtype))
            )
            for p, pos, local in split:
                res[pos] = take_rows(self._column(p, name)["data"], local)
        if target is None:
            return _to_torch(res, f.dtype)
        t = out[name]  # type: ignore[index]
        return t if len(t) == b else t[:b]

    def _gather_var(self, name: str, f: fmt.Field, b: int, split: list) -> RaggedBatch:
        pieces = []
        for p, pos, local in split:
            col = self._column(p, name)
            where = str(self._file(p, name, "offsets"))
            values, offsets = var_take(col["values"], col["offsets"], local, where)
            shapes = col["shapes"][local] if "shapes" in col else None
            if shapes is not None and isinstance(f, fmt.Ragged):  # only Ragged has shapes
                check_shapes(shapes, offsets, f.inner_shape, self._file(p, name, "shapes"))
            pieces.append((pos, values, offsets, shapes))
        if len(pieces) == 1 and pieces[0][0] is None:
            _, values, offsets, shapes = pieces[0]
        else:  # several parts: concatenate in part order, then one more gather restores order
            order = np.concatenate([pos for pos, *_ in pieces]) if pieces else np.zeros(0, np.int64)
            cat_off = np.concatenate(
                [[0]]
                + [o[1:] + s for (_, _, o, _), s in zip(pieces, _running(pieces), strict=True)]
            ).astype(np.int64)
            cat_val = np.concatenate([v for _, v, _, _ in pieces]) if pieces else None
            inverse = np.empty(b, np.int64)
            inverse[order] = np.arange(b)
            if cat_val is None:
                inner = () if f.variable_dims else f.inner_shape
                cat_val = np.empty((0, *inner), fmt.storage_dtype(f.dtype))
            values, offsets = var_take(cat_val, cat_off, inverse, str(self.path / name))
            shapes = None
            if f.variable_dims:  # (0, ndim) for an empty batch, as with a single part
                ndim = 1 + len(f.inner_shape)
                shapes = np.concatenate([np.zeros((0, ndim), np.int64)] + [s for *_, s in pieces])
                shapes = shapes[inverse]
        return RaggedBatch(
            _to_torch(values, f.dtype),
            torch.from_numpy(offsets),
            None if shapes is None else torch.from_numpy(np.ascontiguousarray(shapes)),
        )

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]:
        """Pre-allocated ``out=`` buffers for :meth:`gather`, one per fixed-shape field."""
        return {
            name: torch.empty(
                (batch_size, *f.shape), dtype=fmt.TORCH_DTYPES[f.dtype], pin_memory=pin_memory
            )
            for name, f in self.schema.items()
            if isinstance(f, fmt.Tensor)
        }

    def to_memory(self) -> Dataset:
        """The same dataset read fully into RAM (sequential reads, at disk speed): the files
        ``open()`` saw, else :class:`DatasetChangedError`. Samples are fresh copies too."""
        mem = type(self).__new__(type(self))
        mem.__setstate__({**self.__getstate__(), "in_memory": True})
        if mem._stale is not None:
            raise mem._changed(mem._stale)
        return mem

    @property
    def nbytes(self) -> int:
        """Bytes on disk of the selected fields."""
        return sum(
            p.info.files[fn].nbytes
            for p in self._parts
            for name, f in self.schema.items()
            for fn in fmt.field_files(name, f).values()
        )

    def close(self) -> None:
        """Drop the file maps (they are unmapped once no batch refers to them)."""
        for p in self._parts:
            p.columns.clear()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Pickle as (path, options) plus what open() saw: the manifest and each file's
        # identity. Each worker process maps the files itself (fork and spawn share the page
        # cache, nothing is copied on write) and checks that they are still those files.
        return {
            "path": str(self.path),
            "fields": self._fields_arg,
            "in_memory": self._in_memory,
            "manifest": self._manifest.to_json(),
            "files": self._identity,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        manifest = fmt.parse_manifest(state["manifest"])
        self._setup(
            Path(state["path"]), manifest, state["fields"], state["in_memory"], state["files"]
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {v}" for k, v in self.schema.items())
        return f"chute.Dataset({str(self.path)!r}, {self._len} samples, {{{fields}}})"


def _strings(values: np.ndarray, offsets: np.ndarray) -> list[str]:
    raw = values.tobytes()
    return [raw[i:j].decode("utf-8", "replace") for i, j in itertools.pairwise(offsets.tolist())]


def _data_nbytes(f: fmt.Field, role: str, n: int) -> int | None:
    """Bytes after the header of file ``role`` of a part of ``n`` samples (None: values)."""
    shape = fmt.expected_shape(f, role, n)
    if shape is None or role == "values":
        return None
    itemsize = fmt.storage_dtype(f.dtype).itemsize if role == "data" else 8
    return math.prod(shape) * itemsize


def _running(pieces: list) -> list[int]:
    totals = [int(o[-1]) for _, _, o, _ in pieces]
    return [sum(totals[:i]) for i in range(len(totals))]


def open(path: str | bytes | os.PathLike, fields: Sequence[str] | None = None) -> Dataset:
    """Open the dataset at ``path`` lazily: O(1) in its size (reads the manifest only).

    ``fields`` restricts reading to some fields. The path is made absolute, so a later
    ``chdir`` does not change which files are read.
    """
    return Dataset(path, fields)
