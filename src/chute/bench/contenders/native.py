"""chute itself: the threaded ``chute.Loader``, and ``chute.dataloader`` (a torch DataLoader
whose worker processes each gather whole batches of their share of the pass)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ...loader.dataloader import dataloader
from ...loader.loader import Loader
from ...reader.opening import open as open_dataset
from .contender import Batch, Contender, Setup


def copy_path(setup: Setup) -> Path:
    """The bench's chute copy, written by the harness before any store (all are made from it)."""
    return setup.copy


def _loader(setup: Setup) -> Iterable[Batch]:
    ds = open_dataset(setup.copy)
    return Loader(ds, setup.batch_size, shuffle=True, seed=setup.seed, num_workers=setup.workers)


def _dataloader(setup: Setup) -> Iterable[Batch]:
    ds = open_dataset(setup.copy)
    return dataloader(
        ds, batch_size=setup.batch_size, shuffle=True, seed=setup.seed, num_workers=setup.workers
    )


CONTENDERS = [
    Contender(
        "chute Loader",
        "chute.open + Loader: worker threads gather whole batches into fresh, pooled buffers",
        copy_path,
        _loader,
    ),
    Contender(
        "chute.dataloader",
        "torch DataLoader whose worker processes make their own shares of the pass, batches "
        "lent from shared memory",
        copy_path,
        _dataloader,
    ),
]
