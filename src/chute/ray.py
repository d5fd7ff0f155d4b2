"""Ray Data in and out: ``chute.ray.read`` gives a ``ray.data.Dataset`` of a chute dataset,
``chute.ray.Sink`` / ``chute.ray.write`` write a Ray dataset as a chute dataset.

>>> import chute.ray
>>> ds = chute.ray.read("train.chute")                  # one read task per part / row range
>>> ds = ds.map_batches(preprocess)
>>> chute.ray.write(ds, "clean.chute")                  # or ds.write_datasink(chute.ray.Sink(...))

Reads are memory-mapped in the read tasks; writes go to a staging folder and are committed
once, by the driver, when every write task has succeeded (the pattern of
:func:`chute.from_dask`): a failed write leaves nothing that ``chute.open`` accepts, and a
retried task adds no rows twice. ``import chute.ray`` does not import Ray; the first use does
(``pip install 'chute[ray]'``). The Ray classes live in :mod:`chute.engines`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .errors import require

if TYPE_CHECKING:
    import ray.data

    from . import kinds
    from .engines.ray_read import Source
    from .engines.ray_write import Sink
    from .reader.gatherable import Gatherable

__all__ = ["Sink", "Source", "read", "write"]


def _read() -> ModuleType:
    """:mod:`chute.engines.ray_read`, imported on first use (it imports Ray)."""
    require("ray.data", "ray")
    from .engines import ray_read

    return ray_read


def _write() -> ModuleType:
    """:mod:`chute.engines.ray_write`, imported on first use (it imports Ray)."""
    require("ray.data", "ray")
    from .engines import ray_write

    return ray_write


def read(
    path: str | os.PathLike | Gatherable,
    fields: Sequence[str] | None = None,
    *,
    rows_per_task: int | None = None,
    **read_args: Any,
) -> ray.data.Dataset:
    """The chute dataset at ``path`` as a ``ray.data.Dataset`` (lazy, like all Ray reads).
    ``path`` may also be a view of an opened dataset, ``chute.windows(...)`` or
    ``chute.pack(...)`` (or a torch ``Subset``): its samples are the rows, read in ranges of
    them (``fields=`` is then chosen at ``chute.open``).

    One read task per part, or per ``rows_per_task`` rows of a part (by default each part is
    split so that there are about as many tasks as Ray asks for). Each task memory-maps the
    files and yields blocks of about Ray's target block size. Columns: fixed fields as tensor
    columns (scalars as plain columns; bfloat16 as float32), ragged fields as list columns
    (ragged fields with inner dimensions as variable-shaped tensor columns), Bytes as binary
    and String as string columns. ``read_args`` go to ``ray.data.read_datasource``
    (``concurrency=``, ``ray_remote_args=``, ...). The dataset is opened (and checked) here;
    a dataset replaced before the tasks run makes them raise ``DatasetChangedError``.

    ``iter_torch_batches`` collates fixed fields by itself; ragged, bytes and string columns
    need a ``collate_fn`` (Ray cannot stack them).
    """
    return _read().read(path, fields, rows_per_task=rows_per_task, **read_args)


def write(
    ds: ray.data.Dataset,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    part_size: int | None = None,
    schema: Mapping[str, kinds.Field] | None = None,
    metadata: Mapping[str, Any] | None = None,
    **write_args: Any,
) -> Path:
    """Write the Ray dataset ``ds`` as a chute dataset at ``path``; returns the path.

    ``ds.write_datasink(chute.ray.Sink(path, ...), **write_args)``: see :class:`Sink`.
    """
    sink = _write().Sink(
        path, overwrite=overwrite, part_size=part_size, schema=schema, metadata=metadata
    )
    ds.write_datasink(sink, **write_args)
    return Path(sink.path)


def __getattr__(name: str) -> Any:
    if name == "Source":
        return _read().Source
    if name == "Sink":
        return _write().Sink
    raise AttributeError(f"module 'chute.ray' has no attribute {name!r}")
