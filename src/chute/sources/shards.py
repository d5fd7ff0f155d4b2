"""``chute.from_shards``: one dataset written by N processes, one part per shard of the input.

Tokenizing a corpus is CPU-bound Python (a tokenizer per document); ``Writer(append=True)``
from several processes takes the dataset's lock, so they run one at a time. Here each shard
(a file name, a row range: anything picklable) is given to ``fn(shard)`` in a worker process,
whose samples (dicts, as :meth:`chute.Writer.append` takes) are written by a
:class:`~chute.Writer` of that process into the staging folder beside ``dst``. When every
shard is written, the parent makes one schema of theirs, moves each shard's data in as parts
(in shard order: sample order is shard order, then each shard's own), writes the manifest once
and moves the dataset into place atomically (:func:`chute.writer.commit.commit`). If any shard
fails, nothing is left at ``dst`` and its error is raised with the worker's traceback.

The schema. With ``schema=`` every worker writes it. Inferred, each shard infers its own and
the parent reconciles them: a field that is a fixed-shape Tensor in one shard (its documents
happened to have one length) and Ragged, or another length, in another becomes Ragged in all
(those shards' files rewritten, the values copied once); a field whose samples were all
empty in a shard takes the others' dtype; any other difference is a
:class:`~chute.errors.SchemaError` naming the field and the shards.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .. import format as fmt
from .._args import check_int, check_path, default_workers
from ..errors import ArgumentError, SchemaError
from ..kinds import Field, Manifest, PartInfo, Ragged
from ..manifest_file import read_manifest
from ..writer.commit import commit, new_staging_dir
from ..writer.field_files import promote
from ..writer.writer import Writer
from .iterable import columns

__all__ = ["from_shards"]


def from_shards(
    shards: Sequence[Any],
    fn: Callable[[Any], Iterable[Mapping[str, Any]]],
    dst: str | os.PathLike,
    schema: Mapping[str, Field] | None = None,
    *,
    num_workers: int | None = None,
    batch_size: int = 256,
    overwrite: bool = False,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    multiprocessing_context: Any = None,
) -> Path:
    """Write the samples of ``fn(shard)`` for every shard, in ``num_workers`` processes
    (default: the CPUs, at most 4), as one dataset at ``dst`` (see the module doc). ``fn``
    must be picklable (a module-level function). Example::

        def tokenize(path):
            for line in open(path):
                yield {"tokens": np.array(tok.encode(line).ids, np.int32)}

        chute.from_shards(sorted(glob("corpus/*.txt")), tokenize, "corpus.chute",
                          {"tokens": chute.Ragged("int32")}, num_workers=8)
    """
    path = check_path(dst).absolute()
    if not callable(fn):
        raise ArgumentError(f"fn must be callable (a module-level function), got {fn!r}")
    shards = list(shards)
    workers = default_workers() if num_workers is None else check_int("num_workers", num_workers, 1)
    check_int("batch_size", batch_size, 1)
    staging = new_staging_dir(path, overwrite)
    try:
        jobs = [
            (fn, shard, str(staging / f"shard-{i:05d}"), schema, batch_size)
            for i, shard in enumerate(shards)
        ]
        with (
            ProcessPoolExecutor(
                max_workers=max(1, min(workers, len(jobs))), mp_context=multiprocessing_context
            ) as pool,
            tqdm(total=len(jobs), unit=" shards", disable=not progress, desc=path.name) as bar,
        ):
            futures = [pool.submit(_write_shard, *job) for job in jobs]
            wrote = []
            for fut in futures:
                wrote.append(fut.result())  # the first failure, with the worker's traceback
                bar.update(1)
        manifests = {
            i: read_manifest(staging / f"shard-{i:05d}") for i, ok in enumerate(wrote) if ok
        }
        if schema is not None:
            merged = dict(schema)
        elif manifests:
            merged = _reconcile(manifests, staging)
        else:
            raise SchemaError(f"no samples to write to {path} and no schema= to write none")
        parts = _move_parts(manifests, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return commit(staging, path, merged, parts, metadata, overwrite)


def _write_shard(
    fn: Callable[[Any], Iterable[Any]],
    shard: Any,
    folder: str,
    schema: Mapping[str, Field] | None,
    batch_size: int,
) -> bool:
    """The task: write ``fn(shard)`` as a dataset at ``folder`` (runs in a worker); False
    when it yielded no sample and no schema was given (nothing written)."""
    w = Writer(folder, schema)
    try:
        it = iter(fn(shard))
        while chunk := list(islice(it, batch_size)):
            w.extend(columns(chunk))
        if w.schema is None:
            w.abort()
            return False
        w.commit()
        return True
    except BaseException:
        w.abort()
        raise


def _reconcile(manifests: dict[int, Any], staging: Path) -> dict[str, Field]:
    """One schema for the shards' own (see the module doc), rewriting the fields of shards
    that differ from it (``manifests`` updated)."""
    first = min(manifests)
    names = list(manifests[first].fields)
    for i, m in manifests.items():
        if sorted(m.fields) != sorted(names):
            raise SchemaError(
                f"shard {i} has fields {sorted(m.fields)}, shard {first} has "
                f"{sorted(names)}; fn must yield the same fields for every shard"
            )
    merged: dict[str, Field] = {}
    for name in names:
        kinds = {i: m.fields[name] for i, m in manifests.items()}
        merged[name] = _one_field(name, kinds, manifests, staging)
    return merged


def _one_field(
    name: str, kinds: dict[int, Field], manifests: dict[int, Any], staging: Path
) -> Field:
    """The field ``name`` of every shard will have; shards whose field differs rewritten."""
    distinct = set(kinds.values())
    if len(distinct) == 1:
        return next(iter(distinct))
    with_values = {
        i: f
        for i, f in kinds.items()
        if not _no_values(staging / f"shard-{i:05d}", manifests[i], name, f)
    }
    dtypes = {f.dtype for f in (with_values or kinds).values()}
    shapes = [f.sample_shape for f in kinds.values() if f.numeric]
    ndims = {len(s) for s in shapes}
    if len(dtypes) > 1 or len(shapes) != len(kinds) or ndims != {max(ndims)} or 0 in ndims:
        got = ", ".join(f"shard {i}: {f!r}" for i, f in kinds.items())
        raise SchemaError(
            f"field {name!r} differs between the shards ({got}); make fn yield one dtype and "
            "number of dimensions, or pass schema= (e.g. chute.Ragged('int32') for tokens)"
        )
    inner = tuple(
        dims[0] if len(set(dims)) == 1 else None
        for dims in zip(*(s[1:] for s in shapes), strict=True)
    )
    target = Ragged(dtypes.pop(), inner)
    for i, f in kinds.items():
        if f != target:
            _rewrite(staging / f"shard-{i:05d}", manifests, i, name, f, target)
    return target


def _no_values(folder: Path, manifest: Any, name: str, f: Field) -> bool:
    """Whether field ``name`` holds no value in any part of the shard at ``folder``."""
    role = "data" if f.fixed else "values"
    for part in manifest.parts:
        file = folder / part.name / f.files(name)[role]
        if np.load(file, mmap_mode="r", allow_pickle=False).size:
            return False
    return True


def _rewrite(
    folder: Path, manifests: dict[int, Any], i: int, name: str, old: Field, new: Field
) -> None:
    """Field ``name`` of every part of shard ``i`` rewritten from ``old`` to ``new`` (its
    manifest's part infos updated to the new files)."""
    m = manifests[i]
    parts = []
    for info in m.parts:
        col = promote(folder / info.name, name, old, new, None, info.num_samples)
        stale = set(old.files(name).values())
        files = {k: v for k, v in info.files.items() if k not in stale}
        parts.append(PartInfo(info.name, info.num_samples, {**files, **col.close()}))
    manifests[i] = Manifest({**m.fields, name: new}, tuple(parts), m.metadata)


def _move_parts(manifests: dict[int, Any], staging: Path) -> list[PartInfo]:
    """Every shard's parts moved into ``staging`` as ``part-NNNNN`` in shard order."""
    out: list[PartInfo] = []
    for i, m in sorted(manifests.items()):
        shard = staging / f"shard-{i:05d}"
        for info in m.parts:
            name = f"part-{len(out):05d}"
            target = staging / name
            if info.name == fmt.ROOT_PART:
                for file in info.files:
                    (target / file).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(shard / file, target / file)
            else:
                os.replace(shard / info.name, target)
            out.append(PartInfo(name, info.num_samples, info.files))
        shutil.rmtree(shard)
    return out
