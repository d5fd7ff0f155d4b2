"""Subsets: a ``torch.utils.data.Subset`` of a chute Dataset, read by chute's loaders.

A held-out split is made the torch way, ``train, val = random_split(ds, [0.9, 0.1])`` or
``Subset(ds, indices)`` (nested Subsets too), and passed to :class:`~chute.Loader` or
:func:`chute.dataloader`. :func:`loadable` flattens it into a :class:`SubsetDataset`: the chute
Dataset underneath and one int64 array ``indices`` of its samples (nested Subsets composed,
negative indices counted from the end, every index checked once, here). Position ``i`` of the
subset is sample ``indices[i]`` of the dataset, so the loaders' :class:`~chute.order.Order`
runs over ``range(len(subset))`` (shuffling, sharding across ranks, ``state_dict`` / resume
all count positions of the subset) and a batch of positions is read as one
``ds.gather(indices[batch])``: one vectorized lookup, no per-sample Python. A
``SubsetDataset`` pickles as the dataset (its path and manifest: independent of the number of
samples) plus the indices, 8 bytes a sample of the subset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentValueError
from .gather_args import check_indices
from .gatherable import Batch, Buffers, Feed, Gatherable, Pad, PerEpoch, Prefetching
from .wrapper import Wrapper

__all__ = ["SubsetDataset", "loadable"]


class SubsetDataset(Wrapper):
    """Samples ``indices`` of chute dataset ``dataset``, in that order, as a dataset of their
    own: ``len()``, ``gather(positions)``, ``sub[i]``, ``schema``, ``empty_batch``.

    Made by :func:`loadable` from a ``torch.utils.data.Subset``; ``indices`` are checked there.
    """

    def __init__(self, dataset: Gatherable, indices: np.ndarray) -> None:
        self.dataset = dataset
        self.indices = indices
        self.indices.setflags(write=False)

    def __len__(self) -> int:
        return len(self.indices)

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch:
        """Positions ``indices`` of the subset as one batch: one gather from the dataset."""
        pos = check_indices(indices, len(self.indices), self, positions=True)
        return self.dataset.gather(self.indices[pos], out=out, pad=pad)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample at position ``i`` of the subset (an int)."""
        (j,) = self.indices[check_indices([i], len(self.indices), self)]
        return self.dataset[int(j)]

    def prefetch(self, batches: Iterable[np.ndarray]) -> Feed | None:
        """Fetch ahead for the dataset's samples of these positions, if it fetches at all."""
        base = self.dataset
        if not isinstance(base, Prefetching):
            return None
        feed = base.prefetch(self.indices[b] for b in batches)
        return None if feed is None else _PositionsFeed(feed, self.indices)

    def __repr__(self) -> str:
        return f"chute.SubsetDataset({self.dataset!r}, {len(self)} samples)"


class _PositionsFeed:
    """A dataset's prefetch feed, told the subset's positions."""

    def __init__(self, feed: Feed, indices: np.ndarray) -> None:
        self.feed, self.indices = feed, indices

    def at(self, indices: np.ndarray) -> None:
        self.feed.at(self.indices[indices])

    def close(self) -> None:
        self.feed.close()


def loadable(ds: Any, who: str) -> Gatherable:
    """What loader ``who`` reads for ``ds``: a chute Dataset as it is, a (nested) torch
    ``Subset`` of one as a :class:`SubsetDataset`; anything else is refused."""
    chain: list[Any] = []  # the Subsets' indices, outermost first
    base = ds
    while isinstance(base, torch.utils.data.Subset):
        chain.append(base.indices)
        base = base.dataset
    if not isinstance(base, Gatherable):
        got = type(base).__name__ + (" inside a torch Subset" if chain else "")
        raise ArgumentError(
            f"{who} needs a chute Dataset (chute.open(path)) or a torch.utils.data.Subset of "
            f"one, not {got}; for a torch Dataset use torch.utils.data.DataLoader"
        )
    if not chain:
        return base
    if isinstance(base, PerEpoch):
        raise ArgumentValueError(
            f"{who} got a torch Subset of a chute.mix: a mix's positions hold other samples "
            "every epoch, so a split of it is not held out; split each source (random_split), "
            "then mix the training splits"
        )
    idx = None  # the composed indices so far, innermost Subset first
    for indices in reversed(chain):
        if idx is None:
            idx = check_indices(indices, len(base), f"a Subset of {base!r}", positions=True)
        else:
            idx = idx[
                check_indices(
                    indices, len(idx), f"a Subset of a Subset of {base!r}", positions=True
                )
            ]
    return SubsetDataset(base, np.array(idx, dtype=np.int64))  # a copy: the user's may change
