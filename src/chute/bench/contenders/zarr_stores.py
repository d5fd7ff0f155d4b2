"""Zarr v3, as a folder (``LocalStore``) and as a zip file (``ZipStore``).

Both use chunks of ~64 KiB along the sample axis (at least one sample) and no compressor, so
the comparison is about storage access, not codecs. Measured on 3 KB samples, that read a
sample in ~0.3 ms where one-sample chunks in 1 MiB shards took ~1.1 ms (zarr reads the shard
index on every access) and one file per sample took ~0.4 ms and long to write. Reads are per
sample in DataLoader workers, each worker opening its own store.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from ...errors import MissingDependencyError, require
from .contender import Batch, Contender, PerSample, Setup, per_sample_loader, storage

CHUNK_BYTES = 64 << 10


def chunk_rows(setup: Setup) -> int:
    """Samples per chunk: ~64 KiB of the widest field, at least one sample."""
    widest = max(f.row_nbytes() for f in setup.fields.values())
    return max(1, CHUNK_BYTES // max(1, widest))


def _write(setup: Setup, store: Any) -> None:
    zarr = require("zarr", "zarr")
    if not hasattr(zarr, "create_array"):
        raise MissingDependencyError(f"zarr {zarr.__version__} is too old: pip install 'zarr>=3'")
    rows = chunk_rows(setup)
    arrays = {
        n: zarr.create_array(
            store,
            name=setup.key(n),
            shape=(setup.num_samples, *f.shape),
            dtype=storage(f),
            chunks=(rows, *f.shape),
            compressors=None,
        )
        for n, f in setup.fields.items()
    }
    for start, chunk in setup.chunks(rows):  # whole chunks: no read-modify-write
        for n, a in arrays.items():
            a[start : start + len(chunk[n])] = chunk[n]


def write_folder(setup: Setup) -> Path:
    path = setup.root / "zarr"
    _write(setup, require("zarr.storage", "zarr").LocalStore(path))
    return path


def write_zip(setup: Setup) -> Path:
    path = setup.root / "zarr.zip"
    store = require("zarr.storage", "zarr").ZipStore(path, mode="w")
    try:
        _write(setup, store)
    finally:
        store.close()
    return path


def _open(setup: Setup, zipped: bool) -> dict[str, Any]:
    storage_mod = require("zarr.storage", "zarr")
    if zipped:
        store = storage_mod.ZipStore(setup.root / "zarr.zip", mode="r")
    else:
        store = storage_mod.LocalStore(setup.root / "zarr", read_only=True)
    zarr = require("zarr", "zarr")
    return {n: zarr.open_array(store, path=setup.key(n), mode="r") for n in setup.fields}


def _folder(setup: Setup) -> Iterable[Batch]:
    return per_sample_loader(setup, PerSample(partial(_open, setup, False)))


def _zip(setup: Setup) -> Iterable[Batch]:
    return per_sample_loader(setup, PerSample(partial(_open, setup, True)))


_NOTE = "~64 KiB chunks along the samples, no compressor, per-sample reads"
CONTENDERS = [
    Contender("Zarr v3 folder", _NOTE, write_folder, _folder, ("zarr",), "pip install 'zarr>=3'"),
    Contender("Zarr v3 zip", _NOTE, write_zip, _zip, ("zarr",), "pip install 'zarr>=3'"),
]
