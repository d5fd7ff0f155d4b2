"""What :func:`chute.dataloader`'s worker processes run: a map-style view of a chute dataset
whose ``__getitems__`` turns one batch's indices into the whole batch (one gather), and the
batch sampler that sends those indices (with the epoch, for a dataset whose samples depend on
it) from :meth:`chute.Order.plan`. See the NOTE in ``chute/loader/dataloader.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from ..errors import ArgumentError, ChuteError, SchemaError, WorkerError
from ..order import Order, Plan
from ..reader.gather import head
from ..reader.gatherable import Feed, Gatherable, PerEpoch, Prefetching

Sample = dict[str, Any]


def as_is(batch: Any) -> Any:
    """The DataLoader's collate_fn: ``__getitems__`` already returns the whole batch."""
    return batch


class BatchDataset(torch.utils.data.Dataset):
    """Map-style view of a chute Dataset whose ``__getitems__`` returns a whole batch.

    Without ``sample_transform`` (and ``collate_fn``) a batch is one ``ds.gather(indices,
    pad=pad)``.
    With them, each sample ``ds[i]`` goes through ``sample_transform`` and the list is merged by
    ``collate_fn`` (default: torch's ``default_collate``). ``batch_transform`` then runs on the
    batch. All of it runs in the worker process; under spawn the callables must be picklable
    (defined at module level).
    """

    def __init__(
        self,
        ds: Gatherable,
        sample_transform: Callable[[Sample], Any] | None = None,
        batch_transform: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pad: float | int | None = None,
    ) -> None:
        for name, fn in (
            ("sample_transform", sample_transform),
            ("batch_transform", batch_transform),
            ("collate_fn", collate_fn),
        ):
            if fn is not None and not callable(fn):
                raise ArgumentError(f"{name} must be callable, got {fn!r}")
        if pad is not None:
            if sample_transform is not None or collate_fn is not None:
                raise ArgumentError(
                    "pad= pads the gathered batch; with sample_transform or collate_fn the "
                    "samples are collated by collate_fn instead: pad there"
                )
            ds.gather(np.zeros(0, np.int64), pad=pad)  # a bad value fails here, not mid-epoch
        self.dataset = ds
        self.sample_transform = sample_transform
        self.batch_transform = batch_transform
        self.collate_fn = collate_fn
        self.pad = pad

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        return self._sample(self.dataset, i)

    def _sample(self, ds: Any, i: int) -> Any:
        sample = ds[i]
        if self.sample_transform is None:
            return sample
        try:
            return self.sample_transform(sample)
        except Exception as exc:
            raise WorkerError(
                f"sample_transform failed on sample {int(i)}: {type(exc).__name__}: {exc}"
            ) from exc

    def __getitems__(self, indices: Sequence[int] | np.ndarray | tuple[int, np.ndarray]) -> Any:
        ds = self.dataset
        if isinstance(indices, tuple):  # (epoch, indices): a chute.Mix (OrderBatchSampler)
            epoch, indices = indices
            assert isinstance(ds, PerEpoch)
            ds = ds.at_epoch(epoch)
        try:
            if self.sample_transform is None and self.collate_fn is None:
                batch = ds.gather(indices, pad=self.pad)
            else:
                samples = [self._sample(ds, int(i)) for i in indices]
                batch = (self.collate_fn or _collate)(samples)
            return batch if self.batch_transform is None else self.batch_transform(batch)
        except ChuteError:
            raise
        except Exception as exc:
            raise WorkerError(
                f"chute.dataloader failed on the batch of samples {head(indices)}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _collate(samples: list[Any]) -> Any:
    try:
        return default_collate(samples)
    except RuntimeError as exc:
        raise SchemaError(
            f"cannot collate the transformed samples into a batch ({exc}); a field of varying "
            "size needs collate_fn= (e.g. padding), or a sample_transform that makes its "
            "shapes equal"
        ) from exc


class OrderBatchSampler(torch.utils.data.Sampler[Any]):
    """The remaining batches of the order's current epoch (``plan()``: the state does not move).

    ``len()`` is the number of batches of a whole epoch, as for :class:`~chute.Loader`.
    ``with_epoch``: yield ``(epoch, indices)``, for a dataset whose samples depend on the epoch
    (a ``chute.Mix``); the epoch then travels with each batch to the worker processes.
    ``source``: a dataset in object storage, whose parts this process downloads ahead of the
    workers into the node's cache, in the order the batches are handed to them.
    """

    def __init__(
        self, order: Order, with_epoch: bool = False, source: Prefetching | None = None
    ) -> None:
        self.order = order
        self.with_epoch = with_epoch
        self.source = source

    def __iter__(self) -> Iterator[Any]:
        plan = self.order.plan()
        epoch = self.order.epoch  # now, as the plan: not when the generator first runs
        feed = None if self.source is None else self.source.prefetch(plan)
        return self._batches(plan, epoch, feed)

    def _batches(self, plan: Plan, epoch: int, feed: Feed | None) -> Iterator[Any]:
        try:
            for idx in plan:
                if feed is not None:
                    feed.at(idx)  # a worker reads it next
                yield (epoch, idx) if self.with_epoch else idx
        finally:
            if feed is not None:
                feed.close()

    def __len__(self) -> int:
        return len(self.order)
