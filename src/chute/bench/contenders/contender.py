"""What a contender is, and the pieces several contenders share.

A contender is one way a user could feed a training loop: a store (the files it reads, written
once per bench run by ``write``) plus a reader (``open``) that yields batches in the bench's
fixed order. Contenders that read the same store share one ``write`` function, so each store is
written once.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ... import format as fmt
from ... import kinds

Batch = Mapping[str, Any]  # field -> torch.Tensor or np.ndarray with a leading batch axis
Chunks = Callable[[int], Iterator[tuple[int, dict[str, np.ndarray]]]]


@dataclass(frozen=True)
class Setup:
    """Everything a contender needs to write its store and read it in the bench's order."""

    root: Path  # work folder; each store lives in its own entry under it
    copy: Path  # the chute dataset holding the sample: every store is written from it
    fields: Mapping[str, kinds.Tensor]  # the fixed-shape fields benchmarked, in hashing order
    num_samples: int
    batch_size: int
    workers: int
    seed: int
    batches: tuple[np.ndarray, ...]  # epoch 0 of chute.Order: the order every contender reads
    chunks: Chunks  # chunks(rows_multiple) -> (start, {field: rows}) over the whole sample

    def key(self, name: str) -> str:
        """A file- and group-safe key for field ``name`` in a store ("f0", "f1", ...)."""
        return f"f{list(self.fields).index(name)}"

    @property
    def row_nbytes(self) -> int:
        return sum(f.row_nbytes() for f in self.fields.values())

    @property
    def shard_samples(self) -> int:
        """Samples per shard for the stores read in shards (4 per worker, at least 4), so that
        every worker streams a few."""
        return math.ceil(self.num_samples / (4 * max(1, self.workers)))


@dataclass(frozen=True)
class Contender:
    """One row of the bench table."""

    name: str
    note: str  # how it is configured, one line
    write: Callable[[Setup], Path] | None  # writes the store under setup.root, returns its path
    open: Callable[[Setup], Iterable[Batch]]  # cold open -> batches in setup.batches order
    requires: tuple[str, ...] = ()  # optional modules; a missing one skips the contender
    install: str = ""  # what to pip install when one is missing
    own_order: bool = False  # reads in its own order: checked as a set of samples, see measure


def storage(f: kinds.Tensor) -> np.dtype:
    """The numpy dtype a field's samples are copied as (bfloat16 travels as its 16 bits)."""
    return fmt.storage_dtype(f.dtype)


def files_under(path: Path) -> list[Path]:
    """Every regular file of a store (a file, or a folder walked recursively)."""
    if path.is_file():
        return [path]
    return sorted(Path(d) / f for d, _, fs in os.walk(path) for f in fs)


class PerSample(torch.utils.data.Dataset):
    """A map-style dataset reading one sample per ``__getitem__``: what most projects write.

    ``opener`` returns field -> array-like (numpy array, memmap, h5py or zarr array). It runs
    lazily in the process that reads (each DataLoader worker), because h5py and zarr handles
    must not cross a fork; pass ``eager=True`` to open in the parent (in-RAM arrays, memmaps:
    forked workers then share the parent's pages).
    """

    def __init__(self, opener: Callable[[], Mapping[str, Any]], eager: bool = False):
        self._opener = opener
        self._arrays: Mapping[str, Any] | None = opener() if eager else None

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = self._opener()
        return {k: np.asarray(a[i]) for k, a in self._arrays.items()}


def per_sample_loader(setup: Setup, dataset: PerSample) -> Iterable[Batch]:
    """A plain torch DataLoader over ``dataset`` in the bench's order and worker count."""
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=[b.tolist() for b in setup.batches],
        num_workers=setup.workers,
    )
