"""MosaicML Streaming: MDS shards written with ``MDSWriter``, read by its ``StreamingDataset`` in a
torch DataLoader.

Streaming reads shards in its own order: with ``shuffle=False`` the DataLoader workers take
turns, batch by batch, through the samples in shard order. It cannot read the bench's order, so
this row reads one epoch in that order and is checked as a set of samples, as WebDataset is
(``own_order``: see :class:`chute.bench.measure.SampleSetHash`).

Every sample exactly once: streaming partitions an epoch over canonical nodes, ranks, workers and
batches, and evens them out by repeating samples across nodes and ranks, and with empty slots
(-1, skipped) across workers and batches. One canonical node and one rank (not a distributed
run) leave only the empty slots.

Local files only (``local=`` the MDS folder, no ``remote``). A ``StreamingDataset`` keeps the
shared memory it creates (``/dev/shm/NNNNNN_*``) and its file locks (``TMPDIR/NNNNNN_*``)
until the interpreter exits; the reader frees them when the epoch ends (see :func:`_release`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from functools import partial
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ... import kinds
from .contender import Batch, Contender, Setup, storage

_STORE = "mds"


def _column(f: kinds.Tensor) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape of a field's MDS ``ndarray`` column. MDS has no 0-d arrays (scalars
    are stored as shape (1,)) and no bool or complex dtypes (stored as their bytes, uint8)."""
    dtype, shape = storage(f), f.shape or (1,)
    if dtype.kind in "uif":
        return dtype, shape
    return np.dtype(np.uint8), (*shape[:-1], shape[-1] * dtype.itemsize)


def write_mds(setup: Setup) -> Path:
    """``MDSWriter`` with an ``ndarray`` column of fixed dtype and shape per field, and shards
    of about ``setup.shard_samples`` samples."""
    from streaming import MDSWriter  # optional: the contender is skipped without it

    folder = setup.root / _STORE
    columns = {n: (setup.key(n), *_column(f)) for n, f in setup.fields.items()}
    spec = {k: f"ndarray:{dt.name}:{','.join(map(str, s))}" for k, dt, s in columns.values()}
    limit = min(setup.shard_samples * setup.row_nbytes, 2**32 - 1)  # MDS's limit: < 4 GiB
    with MDSWriter(out=str(folder), columns=spec, size_limit=limit) as w:
        for _, rows in setup.chunks(1):
            arrays = {
                k: np.ascontiguousarray(rows[n]).view(dt).reshape(-1, *s)
                for n, (k, dt, s) in columns.items()
            }
            for i in range(len(next(iter(arrays.values())))):
                w.write({k: a[i] for k, a in arrays.items()})
    return folder


def _collate(fields: dict[str, tuple[str, np.dtype, tuple[int, ...]]], samples: list) -> Batch:
    """One batch from MDS samples: each column stacked, viewed back as the field's dtype and
    shape. (``default_collate`` would warn once per worker: MDS decodes into read-only
    arrays.)"""
    return {
        name: torch.from_numpy(np.stack([s[key] for s in samples]).view(dtype).reshape(-1, *shape))
        for key, (name, dtype, shape) in fields.items()
    }


def _release(ds: Any) -> None:
    """Free the shared memory and file locks of ``ds`` now, not at interpreter exit.

    This is streaming's own ``clean_stale_shared_memory`` limited to this dataset's prefix (the
    original frees every prefix, other jobs' included), plus its two file locks, which live in
    ``tempfile.gettempdir()``. The prefix is not public (``_shm_prefix_int``): if streaming
    renames it, tests/bench/test_bench_streaming_libs.py fails instead of memory leaking unseen.
    """
    from streaming.base.constant import BARRIER_FILELOCK, CACHE_FILELOCK, SHM_TO_CLEAN

    prefix = f"{ds._shm_prefix_int:06}"
    for name in SHM_TO_CLEAN:
        try:
            shm = shared_memory.SharedMemory(f"{prefix}_{name}")
        except FileNotFoundError:
            continue
        shm.close()
        shm.unlink()
    for name in (BARRIER_FILELOCK, CACHE_FILELOCK):
        Path(tempfile.gettempdir(), f"{prefix}_{name}").unlink(missing_ok=True)


def _loader(setup: Setup) -> Iterator[Batch]:
    from streaming import StreamingDataset

    ds = StreamingDataset(
        local=str(setup.root / _STORE),
        batch_size=setup.batch_size,  # streaming partitions the epoch into batches per worker
        shuffle=False,
        num_canonical_nodes=1,
    )
    fields = {setup.key(n): (n, storage(f), f.shape) for n, f in setup.fields.items()}
    try:
        yield from torch.utils.data.DataLoader(
            ds,
            batch_size=setup.batch_size,
            num_workers=setup.workers,
            collate_fn=partial(_collate, fields),
        )
    finally:  # also when the bench stops the epoch at its time limit
        _release(ds)


CONTENDERS = [
    Contender(
        "MosaicML Streaming",
        "MDSWriter ndarray columns, StreamingDataset(shuffle=False) in a DataLoader: own order, "
        "order-free checksum",
        write_mds,
        _loader,
        ("streaming",),
        "pip install mosaicml-streaming",
        own_order=True,
    ),
]
