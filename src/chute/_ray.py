"""The Ray Data classes behind :mod:`chute.ray` (this module imports Ray; that one does not).

:class:`Source` (a ``ray.data.Datasource``): the dataset is opened on the driver, which plans
one read task per part or row range; each task gets the :class:`chute.Dataset` (it pickles as
its path, its manifest and the identities of its files), maps the files and turns slices into
Arrow blocks.

:class:`Sink` (a ``ray.data.Datasink``), the pattern of :func:`chute.from_dask`:
``on_write_start`` (driver) creates the staging folder beside the destination; each
``write`` call (a task) writes its rows as one or more parts with
:func:`chute.writer.write_part`, each into a folder it claims under a fresh random name, so a
retried attempt never writes into the folder of an earlier one; ``on_write_complete``
(driver) keeps only the parts the successful tasks reported, names them ``part-00000...`` in
task order, and commits the manifest (:func:`chute.writer.commit`): the one moment the
dataset appears. ``on_write_failed`` removes the staging folder.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray.data
import torch
from ray.data import Datasink, Datasource, ReadTask
from ray.data.block import Block, BlockAccessor, BlockMetadata

from . import format as fmt
from .columns import infer_field, promote
from .errors import ArgumentError, SchemaError
from .fetch import RaggedBatch
from .reader import Dataset
from .writer import commit, new_staging_dir, write_part

_BLOCK_BYTES = 128 << 20  # rows per block when Ray's context gives no target size
# A part is split into read tasks of no less than this: a Ray task costs milliseconds to
# schedule and each one checks the dataset's files (benchmarks/ray_read.py: splitting 8 parts
# of 8 MB into Ray's 56 requested tasks halved the rows/s).
MIN_TASK_BYTES = 32 << 20
_TASK_ROW_LIMIT = "per_task_row_limit" in inspect.signature(ReadTask.__init__).parameters


def _positive(name: str, value: Any) -> int | None:
    if value is not None and (type(value) is not int or value < 1):  # not bool
        raise ArgumentError(f"{name} must be a positive int or None, got {value!r}")
    return value


def _local(path: str | os.PathLike) -> Path:
    text = os.fspath(path)
    if isinstance(text, str) and "://" in text:
        raise ArgumentError(
            f"{text}: chute.ray reads and writes local paths (or a filesystem every Ray node "
            "mounts at the same path); object-store URLs are not supported yet"
        )
    return fmt.check_path(path).absolute()


# ---------------------------------------------------------------------------- reading


class Source(Datasource):  # type: ignore[misc]  # Ray's classes are untyped for mypy
    """A chute dataset as a Ray ``Datasource``; use :func:`chute.ray.read`."""

    def __init__(
        self,
        path: str | os.PathLike,
        fields: Sequence[str] | None = None,
        rows_per_task: int | None = None,
    ):
        super().__init__()
        self._rows_per_task = _positive("rows_per_task", rows_per_task)
        self.dataset = Dataset(_local(path), fields)

    def get_name(self) -> str:
        return "Chute"

    def estimate_inmemory_data_size(self) -> int | None:
        return self.dataset.nbytes

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        ds = self.dataset
        total = len(ds)
        row_bytes = ds.nbytes / max(total, 1)
        target = getattr(ray.data.DataContext.get_current(), "target_max_block_size", None)
        block_rows = max(1, int((target or _BLOCK_BYTES) // max(row_bytes, 1)))
        extra = {"per_task_row_limit": per_task_row_limit} if _TASK_ROW_LIMIT else {}
        tasks = []
        min_rows = max(1, int(MIN_TASK_BYTES // max(row_bytes, 1)))
        plan = _plan(ds.part_sizes, max(1, parallelism), self._rows_per_task, min_rows)
        for a, b in plan:
            meta = BlockMetadata(
                num_rows=b - a,
                size_bytes=int(row_bytes * (b - a)),
                input_files=None,
                exec_stats=None,
            )
            read = functools.partial(_read_rows, ds, a, b, block_rows)
            tasks.append(ReadTask(read, meta, **extra))
        return tasks


def _plan(
    sizes: Sequence[int], parallelism: int, rows_per_task: int | None, min_rows: int = 1
) -> list[tuple[int, int]]:
    """Row ranges ``[a, b)`` of the read tasks, none across a part boundary: ``rows_per_task``
    rows each, else each part split in proportion to its size to make ~``parallelism``, in
    ranges of at least ``min_rows`` (so one task per part for parts of a few MB)."""
    total = sum(sizes)
    ranges: list[tuple[int, int]] = []
    start = 0
    for n in sizes:
        if n:
            k = min(round(parallelism * n / total), n // min_rows)
            step = rows_per_task or -(-n // max(1, k))
            ranges += [(a, min(a + step, start + n)) for a in range(start, start + n, step)]
        start += n
    return ranges or [(0, 0)]  # an empty dataset: one task, one empty block with the columns


def _read_rows(ds: Dataset, a: int, b: int, block_rows: int) -> Iterator[Block]:
    """The read task: rows ``[a, b)`` (inside one part) as Arrow blocks of ``block_rows``."""
    for s in range(a, max(b, a + 1), block_rows):
        yield _block(ds[s : min(b, s + block_rows)], ds.schema)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # Arrow has no bfloat16


def _tensors(name: str, arr: np.ndarray) -> Any:
    """A numpy batch (or object array of arrays) as a column: Ray's tensor types."""
    return BlockAccessor.batch_to_block({name: arr}).column(name)


def _block(batch: Mapping[str, Any], schema: Mapping[str, fmt.Field]) -> pa.Table:
    cols: dict[str, Any] = {}
    for name, f in schema.items():
        v = batch[name]
        if isinstance(f, fmt.Tensor):
            cols[name] = _tensors(name, _numpy(v))
        elif isinstance(f, fmt.String):
            cols[name] = pa.array(v, pa.large_string())
        else:
            cols[name] = _var_column(name, f, v)
    return pa.table(cols)


def _var_column(name: str, f: fmt.Ragged | fmt.Bytes, v: RaggedBatch) -> Any:
    """Bytes as binary and ragged fields as list columns, sharing the batch's buffers; ragged
    fields with inner dimensions as Ray's variable-shaped tensors (one array per sample)."""
    offsets = v.offsets.numpy()
    if isinstance(f, fmt.Bytes):
        bufs = [None, pa.py_buffer(offsets), pa.py_buffer(v.values.numpy())]
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1, bufs)
    values = _numpy(v.values)
    if not f.inner_shape:
        return pa.LargeListArray.from_arrays(offsets, values)
    rows = np.empty(len(offsets) - 1, object)
    for i, (p, q) in enumerate(itertools.pairwise(offsets.tolist())):
        rows[i] = values[p:q] if v.shapes is None else values[p:q].reshape(v.shapes[i].tolist())
    return _tensors(name, rows)


# ---------------------------------------------------------------------------- writing


class Sink(Datasink):  # type: ignore[misc]  # Ray's classes are untyped for mypy
    """Write a Ray dataset as a chute dataset at ``path``, committed once at the end.

    >>> ds.write_datasink(chute.ray.Sink("out.chute", part_size=100_000))

    The schema is ``schema`` if given, else inferred from the first block of each write task:
    numeric (tensor) columns -> :class:`chute.Tensor`, list / variable-shaped tensor columns
    -> :class:`chute.Ragged`, binary -> :class:`chute.Bytes`, string -> :class:`chute.String`.
    A field whose shape varies between tasks becomes Ragged at the commit, as with
    :class:`chute.Writer`; any other difference is a :class:`chute.SchemaError` naming the
    field. ``part_size`` asks Ray for write calls of at least that many rows and caps each
    part at that many. ``path`` must be local, or on a filesystem every Ray node mounts at
    the same path (the tasks write their parts straight into the staging folder beside it).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        part_size: int | None = None,
        schema: Mapping[str, fmt.Field] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        self.path = _local(path)
        self.overwrite = overwrite
        self.part_size = _positive("part_size", part_size)
        self.schema = None if schema is None else dict(schema)
        self.metadata = dict(metadata or {})
        self._staging: Path | None = None

    def get_name(self) -> str:
        return "Chute"

    @property
    def min_rows_per_write(self) -> int | None:
        return self.part_size

    def on_write_start(self, schema: Any = None) -> None:
        """Driver, before the first write task: create the staging folder."""
        self._staging = new_staging_dir(self.path, self.overwrite)

    def write(self, blocks: Iterable[Block], ctx: Any) -> dict[str, Any]:
        """A write task: its rows as parts in the staging folder; returns what it wrote:
        ``{"task": index, "parts": [(PartInfo, schema), ...]}``. Without ``schema=`` each
        part's schema is inferred from its first block, and a block whose inferred schema
        differs starts a new part (the commit reconciles them)."""
        assert self._staging is not None, "on_write_start was not called"
        batches = (b for b in map(BlockAccessor.for_block, blocks) if b.num_rows() > 0)
        rows = _Rows((_columns(b) for b in batches), self.part_size, self.schema)
        parts: list[tuple[fmt.PartInfo, dict[str, fmt.Field]]] = []
        folder = None
        try:
            while rows.more():
                folder, schema = _claim(self._staging), rows.schema()
                parts.append((write_part(folder, schema, rows.part()), schema))
        except BaseException:
            for name in [*(p.name for p, _ in parts), *([folder.name] if folder else [])]:
                shutil.rmtree(self._staging / name, ignore_errors=True)
            raise
        return {"task": getattr(ctx, "task_idx", 0), "parts": parts}

    def on_write_complete(self, write_result: Any) -> None:
        """Driver, after every write task succeeded: the commit."""
        results = [r for r in write_result.write_returns if r is not None]
        written = [p for r in sorted(results, key=lambda r: r["task"]) for p in r["parts"]]
        try:
            if self._staging is None:  # no block at all: Ray never started the write
                self._staging = new_staging_dir(self.path, self.overwrite)
            staging = self._staging
            schema = _merge([s for _, s in written]) if written else self.schema
            if schema is None:
                raise SchemaError(
                    f"{self.path}: the Ray dataset has no rows and no schema was given; pass "
                    "schema= to chute.ray.Sink / chute.ray.write to write an empty dataset"
                )
            infos: list[fmt.PartInfo] = []
            for info, have in written:
                name = f"part-{len(infos):05d}"
                os.rename(staging / info.name, staging / name)
                info = fmt.PartInfo(name, info.num_samples, info.files)
                infos.append(_conform(staging, info, have, schema))
            if not infos:
                infos.append(write_part(staging / "part-00000", schema, []))
            keep = {i.name for i in infos}
            for stale in staging.iterdir():  # folders of failed or retried attempts
                if stale.name not in keep:
                    shutil.rmtree(stale, ignore_errors=True)
        except BaseException:
            self._remove_staging()
            raise
        commit(staging, self.path, schema, infos, self.metadata, self.overwrite)
        self._staging = None

    def on_write_failed(self, error: Exception) -> None:
        """Driver, when a task or the commit failed: nothing is left at ``path``."""
        self._remove_staging()

    def _remove_staging(self) -> None:
        staging, self._staging = self._staging, None
        # Tasks of the failed write may still be finishing a file in it: try a few times.
        for _ in range(20):
            if staging is None or not staging.exists():
                return
            shutil.rmtree(staging, ignore_errors=True)
            time.sleep(0.05)


def _claim(staging: Path) -> Path:
    """A new part folder under a random name (retried attempts never share one)."""
    while True:
        folder = staging / f"part-{secrets.randbelow(10**9):09d}"
        with contextlib.suppress(FileExistsError):
            folder.mkdir()  # exclusive: the folder is ours
            return folder


class _Rows:
    """The rows of a stream of numpy batches, cut into parts of at most ``size`` rows and of
    one schema (``schema``, else each batch's inferred one)."""

    def __init__(
        self,
        batches: Iterator[dict[str, np.ndarray]],
        size: int | None,
        schema: dict[str, fmt.Field] | None,
    ):
        self._it, self._size, self._fixed = batches, size, schema
        self._head: dict[str, np.ndarray] | None = None
        self._schema: dict[str, fmt.Field] | None = schema

    def more(self) -> bool:
        if self._head is None:
            self._head = next(self._it, None)
            if self._head is not None and self._fixed is None:
                self._schema = _infer_schema(self._head)
        return self._head is not None

    def schema(self) -> dict[str, fmt.Field]:
        """The schema of the next batch."""
        assert self._schema is not None
        return self._schema

    def part(self) -> Iterator[dict[str, Any]]:
        """The batches of one part: up to ``size`` rows, while the schema stays the same."""
        room, schema = self._size, self._schema
        while (room is None or room > 0) and self.more() and self._schema == schema:
            head = self._head
            assert head is not None
            n = len(next(iter(head.values())))
            if room is not None and n > room:
                yield _values({k: v[:room] for k, v in head.items()})
                self._head = {k: v[room:] for k, v in head.items()}
                return
            self._head = None
            yield _values(head)
            room = None if room is None else room - n


def _columns(block: Any) -> dict[str, np.ndarray]:
    cols = block.to_numpy()
    assert isinstance(cols, dict)
    return cols


def _values(batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Object columns (lists, strings, bytes, variable-shaped tensors) as lists of samples."""
    return {k: list(v) if v.dtype == object else v for k, v in batch.items()}


def _infer_schema(batch: Mapping[str, np.ndarray]) -> dict[str, fmt.Field]:
    return {fmt.check_field_name(k): _infer_field(k, v) for k, v in batch.items()}


def _infer_field(name: str, col: np.ndarray) -> fmt.Field:
    """The field of one numpy column of a Ray block."""
    if col.dtype.kind == "U":
        return fmt.String()
    if col.dtype.kind == "S":
        return fmt.Bytes()
    if col.dtype != object:
        return infer_field(name, col, batch=True)
    if any(v is None for v in col):
        raise SchemaError(f"field {name!r}: null values cannot be stored; fill or drop them first")
    if isinstance(col[0], str):
        return fmt.String()
    if isinstance(col[0], (bytes, bytearray)):
        return fmt.Bytes()
    kinds = [infer_field(name, v) for v in col]
    shapes = {k.shape for k in kinds if isinstance(k, fmt.Tensor)}
    if len(shapes) != len(set(kinds)) or len({len(s) for s in shapes}) != 1 or () in shapes:
        raise SchemaError(
            f"field {name!r}: samples of kinds {sorted(map(str, set(kinds)))[:4]} cannot make one "
            "chute field; give arrays of one dtype and number of dimensions, or pass schema="
        )
    dims = list(zip(*shapes, strict=True))[1:]
    inner = tuple(d[0] if len(set(d)) == 1 else None for d in dims)
    return fmt.Ragged(kinds[0].dtype, inner)


def _merge(schemas: list[dict[str, fmt.Field]]) -> dict[str, fmt.Field]:
    """The one schema of all write tasks: the first's, with a field whose shape differs
    between tasks made Ragged (as :class:`chute.Writer` does); any other difference raises."""
    first = schemas[0]
    out = dict(first)
    for s in schemas[1:]:
        if list(s) != list(first):
            raise SchemaError(
                f"write tasks produced different fields: {list(first)} and {list(s)}; every "
                "block must have the same columns"
            )
        for name, f in s.items():
            if f != out[name]:
                out[name] = _widen(name, out[name], f)
    return out


def _dims(f: fmt.Field) -> tuple[int | None, ...] | None:
    """The sample shape with the first axis free (None for bytes and strings)."""
    if isinstance(f, fmt.Tensor):
        return (None, *f.shape[1:]) if f.shape else None
    if isinstance(f, fmt.Ragged):
        return (None, *f.inner_shape)
    return None


def _widen(name: str, a: fmt.Field, b: fmt.Field) -> fmt.Field:
    da, db = _dims(a), _dims(b)
    if da is None or db is None or a.dtype != b.dtype or len(da) != len(db):
        raise SchemaError(
            f"field {name!r} is {a} in some blocks and {b} in others; make the blocks agree "
            "(cast them in map_batches) or pass schema= to chute.ray.Sink / chute.ray.write"
        )
    return fmt.Ragged(
        a.dtype, tuple(x if x == y else None for x, y in zip(da[1:], db[1:], strict=True))
    )


def _conform(
    staging: Path, info: fmt.PartInfo, have: Mapping[str, fmt.Field], want: Mapping[str, fmt.Field]
) -> fmt.PartInfo:
    """Rewrite the fields of a part whose layout is not the merged schema's (made Ragged)."""
    files = dict(info.files)
    for name, f in want.items():
        if have[name] != f:
            for stale in fmt.field_files(name, have[name]).values():
                files.pop(stale, None)
            col = promote(staging / info.name, name, have[name], f, None, info.num_samples)
            files.update(col.close())
    return fmt.PartInfo(info.name, info.num_samples, files)


def read(
    path: str | os.PathLike,
    fields: Sequence[str] | None = None,
    *,
    rows_per_task: int | None = None,
    **read_args: Any,
) -> ray.data.Dataset:
    return ray.data.read_datasource(Source(path, fields, rows_per_task), **read_args)
