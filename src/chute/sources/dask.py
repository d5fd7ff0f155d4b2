"""Dask arrays: each chunk of rows becomes a part, written by its own Dask task.

The client only plans and commits: every task computes its block of rows (all fields) and
writes it with :func:`chute.writer.writer.write_part` into the staging folder next to ``dst``; when
all tasks have succeeded, the client writes the manifest (:func:`chute.writer.commit`) and
renames the folder into place. If any task fails, the staging folder is removed and the
error is raised: nothing is left at ``dst``.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .. import kinds
from ..errors import SchemaError, SourceError, require
from ..store.upload import Staged
from ..store.url import is_url
from ..writer.commit import commit, new_staging_dir
from ..writer.writer import write_part
from .base import array_field, check_name

_WHERE = "<dask arrays>"


def _write_part(
    folder: str, schema: dict[str, kinds.Field], blocks: dict[str, Any]
) -> kinds.PartInfo:
    """The task: write one block of rows as a part (runs on a Dask worker)."""
    batch = {k: v.tolist() if not schema[k].fixed else v for k, v in blocks.items()}
    return write_part(folder, schema, [batch])


def from_dask(
    arrays: Mapping[str, Any],
    dst: str | os.PathLike,
    *,
    overwrite: bool = False,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    scheduler: Any = None,
) -> Path | str:
    """Write Dask arrays (samples along axis 0) as a dataset, one part per chunk of rows.

    >>> x = dask.array.from_zarr("big.zarr")            # or any lazy Dask computation
    >>> chute.from_dask({"x": x, "y": y}, "big.chute")

    All fields are split at the row boundaries of the field with the fewest row chunks (the
    others are rechunked to match), so choose the chunking of that field to set the part
    size. ``scheduler`` is passed to ``dask.compute`` (``"threads"``, ``"processes"``, a
    ``distributed.Client``); None uses Dask's default, i.e. the active Client if there is
    one.

    On a multi-machine cluster (``dask.distributed``, Dask-Jobqueue on Slurm/PBS, Kubernetes):
    ``dst`` must be on a filesystem that the client and every worker mount at the same path
    (NFS, Lustre, GPFS, CephFS...): workers write their parts straight into the staging folder
    ``.NAME.tmp-*`` beside ``dst``, and the client commits. Object stores (S3, GCS) are not
    supported as the workers' destination; a URL ``dst`` (``s3://...``) is staged in a local
    folder (``CACHE_DIR/.staging``: the workers must share it, as above), then uploaded, the
    manifest last. A retried task rewrites its part from scratch.
    """
    if is_url(dst):  # written to a local staging folder (client and workers), then uploaded
        staged = Staged(str(dst), overwrite=overwrite)
        try:
            from_dask(
                arrays, staged.local, progress=progress, metadata=metadata, scheduler=scheduler
            )
        except BaseException:
            staged.discard()
            raise
        return staged.upload()
    da = require("dask.array", "dask")
    dask = require("dask", "dask")
    if not isinstance(arrays, Mapping) or not arrays:
        raise SchemaError("from_dask() takes a non-empty dict of field name -> dask array")
    arrs = {check_name(k, k, _WHERE): da.asarray(v) for k, v in arrays.items()}
    for name, a in arrs.items():
        if a.ndim == 0 or any(math.isnan(c) for c in a.chunks[0]):
            raise SourceError(
                f"{_WHERE}: field {name!r} has no known length along axis 0; "
                "call .compute_chunk_sizes() on it first"
            )
    lengths = {k: a.shape[0] for k, a in arrs.items()}
    if len(set(lengths.values())) > 1:
        raise SourceError(f"{_WHERE}: fields must have the same length (axis 0); got {lengths}")
    schema = {k: array_field(a.dtype, a.shape, _WHERE, k) for k, a in arrs.items()}
    rows = min((a.chunks[0] for a in arrs.values()), key=len)
    arrs = {k: a.rechunk({0: rows}) for k, a in arrs.items()}
    staging = new_staging_dir(dst, overwrite)
    try:
        write = dask.delayed(_write_part, pure=False)
        tasks = [
            write(str(staging / f"part-{i:05d}"), schema, {k: a.blocks[i] for k, a in arrs.items()})
            for i in range(len(rows))
        ]
        with tqdm(
            total=sum(rows),
            unit=" samples",
            disable=not progress,
            desc=Path(dst).name,
        ) as bar:
            infos = _compute(dask, tasks, scheduler, bar)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return commit(staging, dst, schema, infos, metadata, overwrite)


def _compute(dask: Any, tasks: list[Any], scheduler: Any, bar: tqdm) -> list[kinds.PartInfo]:
    """Run the part tasks, ticking ``bar`` as each finishes; results in task order."""
    client = _client(scheduler)
    if client is not None:
        distributed = sys.modules["distributed"]
        futures = client.compute(tasks)
        try:
            for fut in distributed.as_completed(futures):
                bar.update(fut.result().num_samples)
        except BaseException:
            client.cancel(futures)
            raise
        return [f.result() for f in futures]

    from dask.callbacks import Callback

    class Ticks(Callback):
        def _posttask(self, key: Any, result: Any, *args: Any) -> None:
            if isinstance(result, kinds.PartInfo):
                bar.update(result.num_samples)

    with Ticks():
        return list(dask.compute(*tasks, scheduler=scheduler))


def _client(scheduler: Any) -> Any:
    """The ``distributed.Client`` that will run the tasks, or None for a local scheduler."""
    distributed = sys.modules.get("distributed")  # never imported here if the user did not
    if distributed is None or not (scheduler is None or isinstance(scheduler, distributed.Client)):
        return None
    if scheduler is not None:
        return scheduler
    try:
        return distributed.default_client()
    except ValueError:
        return None
