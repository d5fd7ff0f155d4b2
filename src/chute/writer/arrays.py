"""``chute.write``: a dict of equal-length arrays in memory (numpy, torch, lists; memory-mapped
ones larger than RAM too) written as a dataset by a :class:`~chute.writer.writer.Writer`, a
chunk of about ``chunk_bytes`` at a time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import kinds
from .._args import check_path
from ..errors import SchemaError
from ..store.url import is_url
from .schema_inference import check_schema, flatten, infer_field, infer_schema, sample_count
from .writer import Writer, row_bytes

__all__ = ["write"]


def write(
    path: str | os.PathLike,
    arrays: Mapping[str, Any],
    *,
    schema: Mapping[str, kinds.Field] | None = None,
    overwrite: bool = False,
    metadata: Mapping[str, Any] | None = None,
    part_size: int | None = None,
    chunk_bytes: int = 64 << 20,
    storage_options: Mapping[str, Any] | None = None,
    compression: str | None = None,
) -> Path | str:
    """Write a dict of equal-length arrays / tensors / lists as a dataset at ``path``.

    >>> chute.write("cifar.chute", {"image": images, "label": labels})

    ``schema`` may declare some fields only (``{"image": chute.fields.Image()}``): the others
    are inferred from the first sample, as without it. Arrays are copied in chunks of about
    ``chunk_bytes``, so memory-mapped inputs larger than
    RAM work too. Nested dicts give ``group/name`` fields. With ``part_size`` the data is split
    into ``part-NNNNN`` folders of at most that many samples, as with :class:`Writer`
    (which also says how a URL ``path`` is written: ``storage_options``, ``compression``).
    """
    path = str(path) if is_url(path) else check_path(path)  # a URL: see Writer
    arrays = flatten(arrays)
    if not isinstance(arrays, Mapping) or not arrays:
        raise SchemaError("write() takes a non-empty dict of field name -> array")
    n = sample_count(arrays, arrays)
    step = max(1, chunk_bytes // max(row_bytes(arrays, n), 1))
    if schema is None and n == 0:
        schema = {k: infer_field(k, v[:0], batch=True) for k, v in arrays.items()}  # bf16 too
    elif schema is not None and n and any(k not in schema for k in arrays):
        schema = dict(check_schema(schema))  # (a bad schema is named before any inference)
        inferred = infer_schema({k: v[0] for k, v in arrays.items() if k not in schema})
        schema = {**{k: schema[k] if k in schema else inferred[k] for k in arrays}, **schema}
    with Writer(
        path,
        schema,
        overwrite=overwrite,
        metadata=metadata,
        part_size=part_size,
        storage_options=storage_options,
        compression=compression,
    ) as w:
        for start in range(0, n, step):
            w.extend({k: v[start : start + step] for k, v in arrays.items()})
    return path
