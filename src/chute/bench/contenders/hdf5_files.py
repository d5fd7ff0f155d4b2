"""HDF5 through h5py, read one sample per ``__getitem__`` in DataLoader workers.

"contiguous": ``create_dataset(name, data=x)``, no chunks: what most projects write.
"auto-chunked": ``chunks=True`` (also what ``compression=`` or ``maxshape=`` imply): h5py guesses
a chunk shape that splits the data along every axis, so one sample spans many chunks, read
through the default 1 MiB chunk cache. "tuned": one sample per chunk and a chunk cache for 4
batches with ``rdcc_w0=1`` (evict fully read chunks first) and ``rdcc_nslots`` a prime ~100x
the chunks that fit, as the HDF5 docs advise.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from ...errors import require
from .contender import Batch, Contender, PerSample, Setup, per_sample_loader, storage


def _write(setup: Setup, name: str, chunks: str | None) -> Path:
    h5py = require("h5py", "hdf5")
    path = setup.root / name
    with h5py.File(path, "w") as h5:
        dsets = {
            n: h5.create_dataset(
                setup.key(n),
                shape=(setup.num_samples, *f.shape),
                dtype=storage(f),
                chunks={None: None, "auto": True, "sample": (1, *f.shape)}[chunks],
            )
            for n, f in setup.fields.items()
        }
        for start, rows in setup.chunks(1):
            for n, d in dsets.items():
                d[start : start + len(rows[n])] = rows[n]
    return path


def write_contiguous(setup: Setup) -> Path:
    return _write(setup, "contiguous.h5", None)


def write_auto_chunked(setup: Setup) -> Path:
    return _write(setup, "auto-chunked.h5", "auto")


def write_tuned(setup: Setup) -> Path:
    return _write(setup, "tuned.h5", "sample")


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def tuned_cache(setup: Setup) -> dict[str, Any]:
    """h5py.File cache options for one-sample chunks: room for 4 batches of every field."""
    nbytes = max(1 << 20, 4 * setup.batch_size * setup.row_nbytes)
    slots = 100 * 4 * setup.batch_size * len(setup.fields)
    while not _is_prime(slots):
        slots += 1
    return {"rdcc_nbytes": nbytes, "rdcc_w0": 1.0, "rdcc_nslots": slots}


def _open(setup: Setup, name: str, cache: dict[str, Any]) -> dict[str, Any]:
    h5 = require("h5py", "hdf5").File(setup.root / name, "r", **cache)
    return {n: h5[setup.key(n)] for n in setup.fields}


def _contiguous(setup: Setup) -> Iterable[Batch]:
    return per_sample_loader(setup, PerSample(partial(_open, setup, "contiguous.h5", {})))


def _auto_chunked(setup: Setup) -> Iterable[Batch]:
    return per_sample_loader(setup, PerSample(partial(_open, setup, "auto-chunked.h5", {})))


def _tuned(setup: Setup) -> Iterable[Batch]:
    opener = partial(_open, setup, "tuned.h5", tuned_cache(setup))
    return per_sample_loader(setup, PerSample(opener))


CONTENDERS = [
    Contender(
        "h5py, contiguous",
        "create_dataset(data=x): no chunks, per-sample reads",
        write_contiguous,
        _contiguous,
        ("h5py",),
        "pip install 'chute[hdf5]'",
    ),
    Contender(
        "h5py, auto-chunked",
        "chunks=True (h5py's guess), default 1 MiB chunk cache, per-sample reads",
        write_auto_chunked,
        _auto_chunked,
        ("h5py",),
        "pip install 'chute[hdf5]'",
    ),
    Contender(
        "h5py, tuned",
        "1 sample per chunk, rdcc_nbytes for 4 batches, rdcc_w0=1, rdcc_nslots prime",
        write_tuned,
        _tuned,
        ("h5py",),
        "pip install 'chute[hdf5]'",
    ),
]
