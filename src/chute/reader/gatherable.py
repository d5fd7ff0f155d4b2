"""The contract between reading and loading: what :class:`~chute.Loader` and
:func:`chute.dataloader` read from. A :class:`~chute.Dataset`, a Subset of one
(:class:`~chute.reader.subset.SubsetDataset`), and any other source of batches that keeps it (a
mix of datasets) can be loaded, shuffled, sharded and resumed the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from .. import kinds
from ..batch import Pad  # a gather's pad=: one value, or one per field

Buffers = Mapping[str, torch.Tensor]
"""A gather's ``out=``: pre-allocated tensors by field name (made by ``empty_batch``)."""
Batch = dict[str, Any]
"""What a gather returns: ``{field: tensor | RaggedBatch | list[str]}``."""


@runtime_checkable
class Gatherable(Protocol):
    """``len()`` samples with fields ``schema``, read a batch at a time by :meth:`gather`.

    ``gather(indices, out=, pad=)`` returns ``{field: tensor | RaggedBatch | list[str]}`` for
    positions ``indices`` in that order, fixed-shape fields written into ``out`` when given
    (buffers from ``empty_batch``); ``ds[i]`` is one sample. It must pickle cheaply: worker
    processes receive it.
    """

    @property
    def schema(self) -> Mapping[str, kinds.Field]: ...

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> dict[str, Any]: ...

    def gather(self, indices: Any, out: Buffers | None = None, pad: Pad | None = None) -> Batch: ...

    def empty_batch(self, batch_size: int, pin_memory: bool = False) -> dict[str, torch.Tensor]: ...


@runtime_checkable
class PerEpoch(Protocol):
    """A :class:`Gatherable` whose samples depend on the epoch (a :func:`chute.mix`): the
    loaders gather each pass from ``at_epoch(epoch)``, bound to the epoch being loaded, so
    that no shared epoch can race between passes or worker processes."""

    def at_epoch(self, epoch: int) -> Gatherable: ...


@runtime_checkable
class Prefetching(Protocol):
    """A :class:`Gatherable` that can fetch ahead (a dataset in object storage): the loaders
    call ``prefetch(batches)`` with the index arrays of a pass, in order, when it starts,
    tell the result which batch is being read (``at(indices)``, where the gathers do not:
    in worker processes), and ``close()`` it (None: nothing to fetch) when the pass ends."""

    def prefetch(self, batches: Iterable[np.ndarray]) -> Feed | None: ...


class Feed(Protocol):
    def at(self, indices: np.ndarray) -> None: ...
    def close(self) -> None: ...
