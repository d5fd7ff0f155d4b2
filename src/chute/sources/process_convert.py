"""Converting a source of many files in worker processes: one part per process, one commit.

``chute.convert(src, dst, processes=4)`` for Parquet files, Arrow IPC files or WebDataset
shards splits the files into ``processes`` runs of consecutive files (sample order is kept:
part ``i`` holds run ``i``). Each worker process opens the same kind of source over its run,
checks that it finds the same fields, and writes its part with
:func:`chute.writer.writer.write_part` into the staging folder; the parent commits the
manifest once every part is written (:func:`chute.writer.commit.commit`), so a failure
anywhere leaves nothing at ``dst``. Workers are started with ``spawn`` (nothing inherited from
the parent's threads), so a script calling this runs it under ``if __name__ == "__main__":``.
What the sources count while converting (``skipped``,
``nulls``, ``ignored_members``...) is merged across parts: lists joined in part order,
counts added.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .. import kinds
from ..errors import ArgumentError, SourceError
from ..store.url import is_url
from ..writer.commit import commit, new_staging_dir
from ..writer.writer import write_part
from .base import FieldsArg, Source


def _part(
    cls: type[Source],
    files: Sequence[Any],
    fields: FieldsArg,
    options: dict[str, Any],
    folder: str,
    schema: dict[str, kinds.Field],
) -> tuple[kinds.PartInfo, dict[str, Any]]:
    """In a worker: one run of files as one part; (its info, the source's metadata)."""
    with cls(files, fields, **options) as source:  # type: ignore[call-arg]
        if source.schema != schema:
            raise SourceError(
                f"{files[0]}: its fields {source.schema} differ from those of the first file "
                f"{schema}; convert files of one kind together"
            )
        info = write_part(folder, schema, source.batches())
        return info, json.loads(json.dumps(dict(source.metadata)))  # counters as plain dicts


def merge_metadata(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The sources' metadata of every part as one: lists joined, dicts of counts added,
    anything else from the first part."""
    out: dict[str, Any] = {}
    for meta in parts:
        for key, value in meta.items():
            if key not in out:
                out[key] = list(value) if isinstance(value, list) else value
            elif isinstance(value, list):
                out[key].extend(value)
            elif isinstance(value, dict) and all(isinstance(v, int) for v in value.values()):
                merged = dict(out[key])
                for k, v in value.items():
                    merged[k] = merged.get(k, 0) + v
                out[key] = merged
    return out


def convert_in_processes(
    source: Any,
    dst: str | os.PathLike,
    processes: int,
    fields: FieldsArg,
    options: Mapping[str, Any],
    *,
    overwrite: bool = False,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    mp_context: Any = None,
) -> Path:
    """Write ``source`` (a source over ``source.files``) to ``dst`` with ``processes``
    workers, one part each (fewer if there are fewer files)."""
    if type(processes) is not int or processes < 1:
        raise ArgumentError(f"processes must be an int >= 1, got {processes!r}")
    if is_url(dst):
        raise ArgumentError(f"{dst}: processes= writes a local dataset; upload it afterwards")
    files = list(source.files)
    n = min(processes, len(files))
    runs = [files[len(files) * i // n : len(files) * (i + 1) // n] for i in range(n)]
    schema = dict(source.schema)
    staging = new_staging_dir(dst, overwrite)
    bar = tqdm(total=source.num_samples, unit=" samples", disable=not progress, desc=Path(dst).name)
    context = mp_context or mp.get_context("spawn")  # no threads or locks inherited
    try:
        with bar, ProcessPoolExecutor(n, mp_context=context) as pool:
            futures = {
                pool.submit(
                    _part,
                    type(source),
                    run,
                    fields,
                    dict(options),
                    str(staging / f"part-{i:05d}"),
                    schema,
                ): i
                for i, run in enumerate(runs)
            }
            results: dict[int, tuple[kinds.PartInfo, dict[str, Any]]] = {}
            try:
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    bar.update(results[futures[fut]][0].num_samples)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    infos = [results[i][0] for i in range(n)]
    meta = {**merge_metadata([results[i][1] for i in range(n)]), **(metadata or {})}
    return commit(staging, dst, schema, infos, meta, overwrite)
