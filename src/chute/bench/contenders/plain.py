"""Plain numpy baselines: the in-RAM gather limit, and a torch DataLoader over in-RAM arrays or
``np.load(mmap_mode=...)`` memmaps of ordinary ``.npy`` files (what ``np.save`` users have)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np

from .contender import Batch, Contender, PerSample, Setup, per_sample_loader, storage

_STORE = "npy"


def write_npy(setup: Setup) -> Path:
    """One ``.npy`` file per field, filled chunk by chunk through a writable memmap."""
    folder = setup.root / _STORE
    folder.mkdir()
    outs = {
        name: np.lib.format.open_memmap(
            folder / f"{setup.key(name)}.npy", "w+", storage(f), (setup.num_samples, *f.shape)
        )
        for name, f in setup.fields.items()
    }
    for start, rows in setup.chunks(1):
        for name, out in outs.items():
            out[start : start + len(rows[name])] = rows[name]
    for out in outs.values():
        out.flush()
    del outs
    return folder


def _load(setup: Setup, mmap_mode: Literal["c"] | None) -> dict[str, np.ndarray]:
    folder = setup.root / _STORE
    return {n: np.load(folder / f"{setup.key(n)}.npy", mmap_mode=mmap_mode) for n in setup.fields}


def _gather_limit(setup: Setup) -> Iterator[Batch]:
    # The ceiling: everything already in RAM, one np.take per field into a reused buffer
    # (mode="clip" skips the bounds-checked temporary; the order is valid by construction).
    arrays = _load(setup, None)
    bufs = {n: np.empty((setup.batch_size, *a.shape[1:]), a.dtype) for n, a in arrays.items()}
    for idx in setup.batches:
        yield {
            n: np.take(a, idx, axis=0, out=bufs[n][: len(idx)], mode="clip")
            for n, a in arrays.items()
        }


def _in_ram(setup: Setup) -> Iterable[Batch]:
    # loaded in the parent before the workers fork: they share its pages, nothing is copied
    return per_sample_loader(setup, PerSample(partial(_load, setup, None), eager=True))


def _memmap(setup: Setup) -> Iterable[Batch]:
    # "c" (copy-on-write) reads like "r" but gives writable arrays: torch.as_tensor in the
    # default collate warns about read-only ones
    return per_sample_loader(setup, PerSample(partial(_load, setup, "c"), eager=True))


CONTENDERS = [
    Contender(
        "gather limit (in RAM)",
        "ceiling: np.load everything, then np.take(out=) per batch, 1 thread",
        write_npy,
        _gather_limit,
    ),
    Contender(
        "DataLoader, in-RAM arrays",
        "np.load everything, per-sample __getitem__, default collate",
        write_npy,
        _in_ram,
    ),
    Contender(
        "DataLoader, np.memmap",
        "np.load(mmap_mode='c'), per-sample __getitem__, default collate",
        write_npy,
        _memmap,
    ),
]
