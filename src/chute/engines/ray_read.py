"""Ray Data in (behind :mod:`chute.ray`; this module imports Ray, that one does not).

:class:`Source` (a ``ray.data.Datasource``): the dataset is opened on the driver, which plans
one read task per part or row range; each task gets the :class:`chute.Dataset` (it pickles as
its path, its manifest and the identities of its files), maps the files and turns each range's
gather into Arrow blocks. A view of a dataset (``chute.windows``, ``chute.pack``, a torch
``Subset``) travels the same way (it pickles as its dataset and its tables) and is read in
row ranges of its own samples.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import ray.data
import torch
from ray.data import Datasource, ReadTask
from ray.data.block import Block, BlockAccessor, BlockMetadata

from .. import kinds
from .._args import check_int
from ..batch import RaggedBatch
from ..errors import ArgumentError
from ..reader.dataset import Dataset
from ..reader.gatherable import Gatherable
from ..reader.subset import loadable
from .ray_write import local_path

_BLOCK_BYTES = 128 << 20  # rows per block when Ray's context gives no target size
# A part is split into read tasks of no less than this: a Ray task costs milliseconds to
# schedule and each one checks the dataset's files (benchmarks/ray_read.py: splitting 8 parts
# of 8 MB into Ray's 56 requested tasks halved the rows/s).
MIN_TASK_BYTES = 32 << 20
_TASK_ROW_LIMIT = "per_task_row_limit" in inspect.signature(ReadTask.__init__).parameters


class Source(Datasource):  # type: ignore[misc]  # Ray's classes are untyped for mypy
    """A chute dataset as a Ray ``Datasource``; use :func:`chute.ray.read`."""

    def __init__(
        self,
        path: str | os.PathLike | Gatherable,
        fields: Sequence[str] | None = None,
        rows_per_task: int | None = None,
    ):
        super().__init__()
        self._rows_per_task = (
            None if rows_per_task is None else check_int("rows_per_task", rows_per_task, 1)
        )
        self.dataset: Gatherable
        if isinstance(path, (str, os.PathLike)):
            self.dataset = Dataset(local_path(path), fields)
            self._nbytes = self.dataset.nbytes
            self._sizes = tuple(p.num_samples for p in self.dataset.parts)
        else:  # a view (chute.windows, chute.pack, a Subset...): one range of its samples
            if fields is not None:
                raise ArgumentError(
                    "chute.ray.read(fields=) selects the fields of a dataset path; for a view "
                    "such as chute.windows, choose them when opening: chute.open(path, "
                    "fields=[...])"
                )
            self.dataset = loadable(path, "chute.ray.read")
            row = sum(t.nbytes for t in self.dataset.empty_batch(1).values())
            self._nbytes = row * len(self.dataset)
            self._sizes = (len(self.dataset),)

    def get_name(self) -> str:
        return "Chute"

    def estimate_inmemory_data_size(self) -> int | None:
        return self._nbytes

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        ds = self.dataset
        total = len(ds)
        row_bytes = self._nbytes / max(total, 1)
        target = getattr(ray.data.DataContext.get_current(), "target_max_block_size", None)
        block_rows = max(1, int((target or _BLOCK_BYTES) // max(row_bytes, 1)))
        extra = {"per_task_row_limit": per_task_row_limit} if _TASK_ROW_LIMIT else {}
        tasks = []
        min_rows = max(1, int(MIN_TASK_BYTES // max(row_bytes, 1)))
        plan = _plan(
            self._sizes,
            max(1, parallelism),
            self._rows_per_task,
            min_rows,
        )
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


def _read_rows(ds: Gatherable, a: int, b: int, block_rows: int) -> Iterator[Block]:
    """The read task: rows ``[a, b)`` (inside one part) as Arrow blocks of ``block_rows``:
    a dataset's slices (one copy a field), a view's gathers."""
    for s in range(a, max(b, a + 1), block_rows):
        e = min(b, s + block_rows)
        rows = ds[s:e] if isinstance(ds, Dataset) else ds.gather(np.arange(s, e, dtype=np.int64))
        yield _block(rows, ds.schema)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # Arrow has no bfloat16


def _tensors(name: str, arr: np.ndarray) -> Any:
    """A numpy batch (or object array of arrays) as a column: Ray's tensor types."""
    return BlockAccessor.batch_to_block({name: arr}).column(name)


def _block(batch: Mapping[str, Any], schema: Mapping[str, kinds.Field]) -> pa.Table:
    cols: dict[str, Any] = {}
    for name, f in schema.items():
        v = batch[name]
        if f.fixed:
            cols[name] = _tensors(name, _numpy(v))
        elif f.kind == "string":
            cols[name] = pa.array(v, pa.large_string())
        else:
            # an Image field: its JPEG bytes, as a Bytes field would be
            cols[name] = _var_column(name, kinds.Bytes() if f.kind == "image" else f, v)
    return pa.table(cols)


def _var_column(name: str, f: kinds.Field, v: RaggedBatch) -> Any:
    """Bytes as binary and ragged fields as list columns, sharing the batch's buffers; ragged
    fields with inner dimensions as Ray's variable-shaped tensors (one array per sample)."""
    offsets = v.offsets.numpy()
    if f.kind == "bytes":
        bufs = [None, pa.py_buffer(offsets), pa.py_buffer(v.values.numpy())]
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1, bufs)
    values = _numpy(v.values)
    if not f.sample_shape[1:]:
        return pa.LargeListArray.from_arrays(offsets, values)
    rows = np.empty(len(offsets) - 1, object)
    for i, (p, q) in enumerate(itertools.pairwise(offsets.tolist())):
        rows[i] = values[p:q] if v.shapes is None else values[p:q].reshape(v.shapes[i].tolist())
    return _tensors(name, rows)


# ---------------------------------------------------------------------------- writing


def read(
    path: str | os.PathLike | Gatherable,
    fields: Sequence[str] | None = None,
    *,
    rows_per_task: int | None = None,
    **read_args: Any,
) -> ray.data.Dataset:
    return ray.data.read_datasource(Source(path, fields, rows_per_task), **read_args)
