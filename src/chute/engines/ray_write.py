"""Ray Data out (behind :mod:`chute.ray`; this module imports Ray, that one does not).

:class:`Sink` (a ``ray.data.Datasink``), the pattern of :func:`chute.from_dask`:
``on_write_start`` (driver) creates the staging folder beside the destination; each
``write`` call (a task) writes its rows as one or more parts with
:func:`chute.writer.writer.write_part`, each into a folder it claims under a fresh random
name, so a retried attempt never writes into the folder of an earlier one;
``on_write_complete`` (driver) keeps only the parts the successful tasks reported, names them
``part-00000...`` in task order, and commits the manifest
(:func:`chute.writer.commit.commit`): the one moment the dataset appears. ``on_write_failed``
removes the staging folder.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from ray.data import Datasink, ReadTask
from ray.data.block import Block, BlockAccessor

from .. import format as fmt
from .._args import check_int, check_path
from ..errors import ArgumentError, SchemaError
from ..kinds import Bytes, Field, PartInfo, Ragged, String, merge_fields
from ..writer.commit import commit, new_staging_dir
from ..writer.field_files import promote
from ..writer.schema_inference import infer_field
from ..writer.writer import write_part

_BLOCK_BYTES = 128 << 20  # rows per block when Ray's context gives no target size
# A part is split into read tasks of no less than this: a Ray task costs milliseconds to
# schedule and each one checks the dataset's files (benchmarks/ray_read.py: splitting 8 parts
# of 8 MB into Ray's 56 requested tasks halved the rows/s).
MIN_TASK_BYTES = 32 << 20
_TASK_ROW_LIMIT = "per_task_row_limit" in inspect.signature(ReadTask.__init__).parameters


def local_path(path: str | os.PathLike) -> Path:
    text = os.fspath(path)
    if isinstance(text, str) and "://" in text:
        raise ArgumentError(
            f"{text}: chute.ray reads and writes local paths (or a filesystem every Ray node "
            "mounts at the same path); object-store URLs are not supported yet"
        )
    return check_path(path).absolute()


class Sink(Datasink):  # type: ignore[misc]  # Ray's classes are untyped for mypy
    """Write a Ray dataset as a chute dataset at ``path``, committed once at the end.

    >>> ds.write_datasink(chute.ray.Sink("out.chute", part_size=100_000))

    The schema is ``schema`` if given, else inferred from the first block of each write task:
    numeric (tensor) columns -> :class:`chute.fields.Tensor`, list / variable-shaped tensor columns
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
        schema: Mapping[str, Field] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        self.path = local_path(path)
        self.overwrite = overwrite
        self.part_size = None if part_size is None else check_int("part_size", part_size, 1)
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
        parts: list[tuple[PartInfo, dict[str, Field]]] = []
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
            infos: list[PartInfo] = []
            for info, have in written:
                name = f"part-{len(infos):05d}"
                os.rename(staging / info.name, staging / name)
                info = PartInfo(name, info.num_samples, info.files)
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
        schema: dict[str, Field] | None,
    ):
        self._it, self._size, self._fixed = batches, size, schema
        self._head: dict[str, np.ndarray] | None = None
        self._schema: dict[str, Field] | None = schema

    def more(self) -> bool:
        if self._head is None:
            self._head = next(self._it, None)
            if self._head is not None and self._fixed is None:
                self._schema = _infer_schema(self._head)
        return self._head is not None

    def schema(self) -> dict[str, Field]:
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


def _infer_schema(batch: Mapping[str, np.ndarray]) -> dict[str, Field]:
    return {fmt.check_field_name(k): _infer_field(k, v) for k, v in batch.items()}


def _infer_field(name: str, col: np.ndarray) -> Field:
    """The field of one numpy column of a Ray block."""
    if col.dtype.kind == "U":
        return String()
    if col.dtype.kind == "S":
        return Bytes()
    if col.dtype != object:
        return infer_field(name, col, batch=True)
    if any(v is None for v in col):
        raise SchemaError(f"field {name!r}: null values cannot be stored; fill or drop them first")
    if isinstance(col[0], str):
        return String()
    if isinstance(col[0], (bytes, bytearray)):
        return Bytes()
    kinds = [infer_field(name, v) for v in col]
    shapes = {k.sample_shape for k in kinds if k.fixed}
    if len(shapes) != len(set(kinds)) or len({len(s) for s in shapes}) != 1 or () in shapes:
        raise SchemaError(
            f"field {name!r}: samples of kinds {sorted(map(str, set(kinds)))[:4]} cannot make one "
            "chute field; give arrays of one dtype and number of dimensions, or pass schema="
        )
    dims = list(zip(*shapes, strict=True))[1:]
    inner = tuple(d[0] if len(set(d)) == 1 else None for d in dims)
    return Ragged(kinds[0].dtype, inner)


def _merge(schemas: list[dict[str, Field]]) -> dict[str, Field]:
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


def _widen(name: str, a: Field, b: Field) -> Field:
    merged = merge_fields(a, b)
    if merged is None:
        raise SchemaError(
            f"field {name!r} is {a} in some blocks and {b} in others; make the blocks agree "
            "(cast them in map_batches) or pass schema= to chute.ray.Sink / chute.ray.write"
        )
    return merged


def _conform(
    staging: Path, info: PartInfo, have: Mapping[str, Field], want: Mapping[str, Field]
) -> PartInfo:
    """Rewrite the fields of a part whose layout is not the merged schema's (made Ragged)."""
    files = dict(info.files)
    for name, f in want.items():
        if have[name] != f:
            for stale in have[name].files(name).values():
                files.pop(stale, None)
            col = promote(staging / info.name, name, have[name], f, None, info.num_samples)
            files.update(col.close())
    return PartInfo(info.name, info.num_samples, files)
